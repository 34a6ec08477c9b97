//! rustls's process-wide crypto provider, named before a broker client
//! that builds its TLS settings from it (redis-rs for `rediss://`,
//! async-nats for `tls://`).

/// Those clients take rustls's process-wide provider, which rustls cannot
/// pick by itself when both of its providers are built in (`ring`, which
/// sqlx and lapin use here, and `aws-lc-rs`, which another dependency
/// turns on). Name `ring`, unless the program already named one.
pub(crate) fn use_ring_for_tls() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one meanwhile: that one stays.
        // rustls deprecates `ring`'s provider for its lack of post-quantum
        // key exchange; it is the one the relay's other TLS connections
        // use.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
