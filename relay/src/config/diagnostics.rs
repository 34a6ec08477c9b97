//! One-line configuration errors: the field's key path, what is wrong,
//! and where the file sets it (line and column).

/// A value that failed validation: the field's key path and what is wrong.
pub(super) struct Problem {
    field: Vec<String>,
    /// For a relation between fields: the other field, whose position is
    /// shown when `field` keeps its default.
    related: Option<Vec<String>>,
    reason: String,
}

impl Problem {
    pub(super) fn new(field: &[&str], reason: String) -> Self {
        Problem {
            field: key_path(field),
            related: None,
            reason,
        }
    }

    pub(super) fn related_to(mut self, field: &[&str]) -> Self {
        self.related = Some(key_path(field));
        self
    }

    /// `field: reason`, with the line and column of the field, or of the
    /// related one, when `text` sets it.
    pub(super) fn describe(&self, text: Option<&str>) -> String {
        let position = text
            .and_then(|text| {
                find_key_offset(text, &self.field)
                    .or_else(|| find_key_offset(text, self.related.as_deref()?))
                    .map(|offset| format!(" ({})", line_and_column(text, offset)))
            })
            .unwrap_or_default();
        format!("{}: {}{position}", dotted(&self.field), self.reason)
    }
}

/// `&["retry", "base_delay"]` as owned keys.
fn key_path(field: &[&str]) -> Vec<String> {
    field.iter().map(|key| (*key).to_owned()).collect()
}

/// Turns toml's error into one line: the field's key path, the message,
/// and the line and column. An unknown field names its table instead,
/// e.g. ``unknown field `batchsize` in [root], expected one of ...``.
pub(super) fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error
        .message()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let offset = error.span().map(|span| span.start);
    let key_path = offset.and_then(|offset| locate_key_path(text, offset));
    let mut description = match &key_path {
        Some(key_path) if message.starts_with("unknown field `") => {
            describe_unknown_field(&message, &key_path[..key_path.len() - 1])
        }
        Some(key_path) => format!("{}: {message}", dotted(key_path)),
        // toml names no key for a duplicate; quote it.
        None if message == "duplicate key" => match error.span().and_then(|span| text.get(span)) {
            Some(key) => format!("duplicate key `{}`", key.trim()),
            None => message,
        },
        None => message,
    };
    if let Some(offset) = offset {
        description.push_str(&format!(" ({})", line_and_column(text, offset)));
    }
    description
}

/// ``unknown field `x`, expected ...`` becomes
/// ``unknown field `x` in [table], expected ...; did you mean `y`?``.
fn describe_unknown_field(message: &str, table: &[String]) -> String {
    let table_name = if table.is_empty() {
        "[root]".to_owned()
    } else {
        format!("[{}]", dotted(table))
    };
    let prefix = "unknown field `";
    let Some(name_length) = message[prefix.len()..].find('`') else {
        return format!("{message} in {table_name}");
    };
    let name_end = prefix.len() + name_length + 1;
    let unknown = &message[prefix.len()..name_end - 1];
    let mut description = format!(
        "{} in {table_name}{}",
        &message[..name_end],
        &message[name_end..]
    );
    let expected: Vec<&str> = message[name_end..].split('`').skip(1).step_by(2).collect();
    if let Some(suggestion) = closest(unknown, &expected) {
        description.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    description
}

/// The expected name nearest to `unknown`, if it is a plausible typo.
fn closest<'a>(unknown: &str, expected: &[&'a str]) -> Option<&'a str> {
    expected
        .iter()
        .map(|candidate| (edit_distance(unknown, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, counting `-` and `_` as the same character.
fn edit_distance(left: &str, right: &str) -> usize {
    let normalize = |character: char| if character == '-' { '_' } else { character };
    let left: Vec<char> = left.chars().map(normalize).collect();
    let right: Vec<char> = right.chars().map(normalize).collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (left_index, left_char) in left.iter().enumerate() {
        let mut current = vec![left_index + 1];
        for (right_index, right_char) in right.iter().enumerate() {
            let substitution = previous[right_index] + usize::from(left_char != right_char);
            let deletion = previous[right_index + 1] + 1;
            let insertion = current[right_index] + 1;
            current.push(substitution.min(deletion).min(insertion));
        }
        previous = current;
    }
    previous[right.len()]
}

/// The key path of the key or value at byte `offset` of the document,
/// e.g. `["retry", "base_delay"]`.
fn locate_key_path(text: &str, offset: usize) -> Option<Vec<String>> {
    let document = toml::de::DeTable::parse(text).ok()?;
    locate_in_table(document.get_ref(), offset)
}

/// [`locate_key_path`] within one table, recursing into inner tables.
fn locate_in_table(table: &toml::de::DeTable<'_>, offset: usize) -> Option<Vec<String>> {
    for (key, value) in table.iter() {
        let with_key = |mut inner: Vec<String>| {
            inner.insert(0, key.get_ref().to_string());
            inner
        };
        if key.span().contains(&offset) {
            return Some(with_key(Vec::new()));
        }
        if let toml::de::DeValue::Table(inner) = value.get_ref()
            && let Some(inner_path) = locate_in_table(inner, offset)
        {
            return Some(with_key(inner_path));
        }
    }
    // No key at the offset: the value it is in (a whole table for a missing
    // field). Take the innermost.
    table
        .iter()
        .filter(|(_, value)| value.span().contains(&offset))
        .min_by_key(|(_, value)| value.span().len())
        .map(|(key, _)| vec![key.get_ref().to_string()])
}

/// Byte offset of the key at `key_path` in the document, if it is set there.
fn find_key_offset(text: &str, key_path: &[String]) -> Option<usize> {
    let document = toml::de::DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let (last, parents) = key_path.split_last()?;
    for parent in parents {
        let value = table.get(parent.as_str())?;
        let toml::de::DeValue::Table(inner) = value.get_ref() else {
            return None;
        };
        table = inner;
    }
    let (key, _) = table.get_key_value(last.as_str())?;
    Some(key.span().start)
}

/// `line L, column C`, both counted from 1, for a byte offset into `text`.
fn line_and_column(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    format!("line {line}, column {column}")
}

/// A key path as TOML writes it: `kafka.options."linger.ms"`.
fn dotted(key_path: &[String]) -> String {
    key_path
        .iter()
        .map(|key| {
            let bare = !key.is_empty()
                && key.chars().all(|character| {
                    character.is_ascii_alphanumeric() || matches!(character, '-' | '_')
                });
            if bare {
                key.clone()
            } else {
                format!("\"{}\"", key.escape_default())
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}
