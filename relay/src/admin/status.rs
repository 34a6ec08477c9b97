//! [`RelayAdmin::status`]: the table's counts, the live leases and, on
//! PostgreSQL, the relay's replication slots.

use serde::Serialize;

use super::OutboxStatus;
use super::RelayAdmin;
use crate::config::EventSourceKind;
use crate::error::Error;

/// What `outbox-relay status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RelayStatus {
    /// The table's counts, per topic, and the live leases. Under the
    /// logical source, the pending and in-flight counts are the table
    /// path's; the stream's own are in `logical`.
    pub table: OutboxStatus,
    /// The relay's replication slots (PostgreSQL; none elsewhere).
    #[cfg(feature = "logical")]
    pub slots: Vec<super::SlotStatus>,
    /// The logical source's counts, when asked for.
    #[cfg(feature = "logical")]
    pub logical: Option<super::LogicalCounts>,
}

impl RelayAdmin {
    /// The status, counted for `source`: the logical source counts the
    /// events the stream owns apart from those the table path owns.
    ///
    /// # Errors
    /// [`Error::Database`] when a statement fails; [`Error::Logical`] for
    /// the logical source on a database other than PostgreSQL, and
    /// [`Error::FeatureNotBuilt`] for it without the `logical` feature.
    pub async fn status(&self, source: EventSourceKind) -> Result<RelayStatus, Error> {
        let logical = source == EventSourceKind::Logical;
        if logical {
            Error::require_feature("logical", cfg!(feature = "logical"), || {
                "the logical source's status".to_owned()
            })?;
        }
        #[cfg_attr(not(feature = "logical"), allow(unused_mut))]
        let mut table = self.store.status().await?;
        #[cfg(feature = "logical")]
        {
            let Some(postgres) = &self.postgres else {
                if logical {
                    self.postgres("the logical source's status")?;
                }
                return Ok(RelayStatus {
                    table,
                    slots: Vec::new(),
                    logical: None,
                });
            };
            let counts = if logical {
                Some(crate::operator::logical_status(postgres.pool(), &mut table).await?)
            } else {
                None
            };
            let slots = crate::source::logical::relay_slots(postgres.pool()).await?;
            Ok(RelayStatus {
                table,
                slots,
                logical: counts,
            })
        }
        #[cfg(not(feature = "logical"))]
        Ok(RelayStatus { table })
    }
}
