//! The bench's settings, from `--name value` arguments or environment
//! variables (see the bench's own documentation).

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) events: usize,
    pub(crate) workers: Vec<usize>,
    only: Option<Vec<String>>,
}

impl Settings {
    pub(crate) fn load() -> Settings {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let lookup = |flag: &str, env: &str| -> Option<String> {
            args.iter()
                .position(|arg| arg == flag)
                .and_then(|index| args.get(index + 1).cloned())
                .or_else(|| std::env::var(env).ok())
                .filter(|value| !value.trim().is_empty())
        };
        let list = |text: String| -> Vec<String> {
            text.split(',')
                .map(|item| item.trim().to_ascii_lowercase())
                .filter(|item| !item.is_empty())
                .collect()
        };
        let events = lookup("--events", "OUTBOX_BENCH_EVENTS").map_or(20_000, |text| {
            text.trim()
                .replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("--events / OUTBOX_BENCH_EVENTS: not a number: {text}"))
        });
        let workers = lookup("--workers", "OUTBOX_BENCH_WORKERS")
            .map_or_else(|| vec!["1".to_owned(), "8".to_owned()], list)
            .iter()
            .map(|count| {
                count
                    .parse::<usize>()
                    .unwrap_or_else(|_| panic!("bad worker count {count}"))
                    .max(1)
            })
            .collect();
        Settings {
            events: events.max(1),
            workers,
            only: lookup("--only", "OUTBOX_BENCH_ONLY").map(list),
        }
    }

    pub(crate) fn runs(&self, backend: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|name| name == backend))
    }
}
