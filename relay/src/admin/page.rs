//! [`RelayAdmin::bind_page`]: the operators' page (`/ui`) served on its
//! own, for a database without a relay in the process, as `outbox-relay
//! ui` does. What the page shows and who may act on it is described in
//! `docs/operations.md` ("The operators' page").

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;

use super::RelayAdmin;
use crate::config::{EventSourceKind, SlotName, UiTokens};
use crate::error::Error;
use crate::http::HttpEndpoint;
use crate::http::ui::{PageSettings, UiPage};
use crate::tasks::Tasks;

/// What the page served by [`RelayAdmin::bind_page`] needs: the tokens of
/// its actions (none: read-only) and where the relays find events.
///
/// ```
/// use outbox_relay::admin::PageOptions;
/// use outbox_relay::config::{SlotName, UiTokens};
///
/// let mut tokens = UiTokens::default();
/// tokens.add("alice=a-long-random-secret")?;
/// let options = PageOptions::new()
///     .tokens(tokens)
///     .logical(SlotName::parse("outbox_relay")?);
/// # Ok::<(), outbox_relay::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PageOptions {
    /// The named tokens actions need.
    pub tokens: UiTokens,
    /// The polling source, or the logical source and its slot.
    pub source: EventSourceKind,
    /// The logical source's slot, with [`EventSourceKind::Logical`].
    pub slot: Option<SlotName>,
}

impl PageOptions {
    /// Read-only, polling.
    pub fn new() -> Self {
        PageOptions::default()
    }

    /// Accept `tokens` for the page's actions.
    #[must_use]
    pub fn tokens(mut self, tokens: UiTokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// The relays stream from `slot` (`--source logical`): the page shows
    /// the slot's lag and retained WAL.
    #[must_use]
    pub fn logical(mut self, slot: SlotName) -> Self {
        self.source = EventSourceKind::Logical;
        self.slot = Some(slot);
        self
    }
}

/// The page, bound and not yet serving: see [`RelayAdmin::bind_page`].
pub struct PageServer {
    endpoint: HttpEndpoint,
    page: UiPage,
}

impl std::fmt::Debug for PageServer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PageServer")
            .field("address", &self.endpoint.local_addr())
            .finish_non_exhaustive()
    }
}

impl PageServer {
    /// The address bound (port 0 picks a free one).
    pub fn local_addr(&self) -> SocketAddr {
        self.endpoint.local_addr()
    }

    /// Serve until `stop` is cancelled.
    pub async fn serve(self, stop: CancellationToken) {
        let tasks = Tasks::new();
        let served = self.endpoint.serve_page(self.page, &tasks);
        stop.cancelled().await;
        tasks.cancel();
        tasks.wait().await;
        drop(served);
    }
}

impl RelayAdmin {
    /// Bind the operators' page of this database to `listen`, with no
    /// relay in the process: the broker's state is unknown (`null`), and
    /// the publish rate is read from the table.
    ///
    /// ```no_run
    /// use outbox_relay::admin::{PageOptions, RelayAdmin};
    /// use outbox_relay::config::DatabaseUrl;
    /// use tokio_util::sync::CancellationToken;
    ///
    /// # async fn example() -> Result<(), outbox_relay::Error> {
    /// let url: DatabaseUrl = "postgres://postgres@127.0.0.1:5432/shop".parse()?;
    /// let admin = RelayAdmin::connect(url).await?;
    /// let page = admin.bind_page("127.0.0.1:9091".parse().unwrap(), PageOptions::new()).await?;
    /// println!("the operators' page: http://{}/ui", page.local_addr());
    /// page.serve(CancellationToken::new()).await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::HttpListen`] when `listen` cannot be bound;
    /// [`Error::Logical`] for the logical source on a database other than
    /// PostgreSQL, or a build without the `logical` feature.
    pub async fn bind_page(
        &self,
        listen: SocketAddr,
        options: PageOptions,
    ) -> Result<PageServer, Error> {
        let slot = match (options.source, options.slot) {
            (EventSourceKind::Logical, Some(slot)) => Some(slot),
            (EventSourceKind::Logical, None) => Some(SlotName::parse(crate::source::DEFAULT_SLOT)?),
            _ => None,
        };
        #[cfg(feature = "logical")]
        let slot = match slot {
            Some(slot) => Some((
                self.postgres("the logical source's page")?.pool().clone(),
                slot,
            )),
            None => None,
        };
        #[cfg(not(feature = "logical"))]
        if slot.is_some() {
            return Err(Error::FeatureNotBuilt {
                feature: "logical",
                needed_for: "the logical source's page".to_owned(),
            });
        }
        let settings = PageSettings {
            tokens: options.tokens,
            #[cfg(feature = "logical")]
            slot,
        };
        let endpoint = HttpEndpoint::bind(listen).await?;
        Ok(PageServer {
            endpoint,
            page: UiPage::for_database(std::sync::Arc::clone(&self.store), settings),
        })
    }
}
