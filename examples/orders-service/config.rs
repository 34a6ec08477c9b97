//! The service's settings, from flags or the environment.

use std::net::SocketAddr;

use clap::Parser;

/// An HTTP service that writes each order and its `order.created` event in
/// one PostgreSQL transaction.
#[derive(Debug, Parser)]
#[command(name = "orders-service")]
pub struct Config {
    /// PostgreSQL database for the orders and the outbox tables.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub database_url: String,

    /// Address to listen on; port 0 picks a free port. The bound address is
    /// printed on stdout as `listening on http://ADDRESS`.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
}
