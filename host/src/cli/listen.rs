//! Where a server of `run` listens: an address, or `off`. Its own module
//! because `run`'s options and the metrics options both take one, and the
//! metrics options are part of `run`'s: the shape sits beneath both.

use std::net::SocketAddr;

/// `--http-listen` and the like: an address, or `off`.
#[derive(Clone, Debug)]
pub enum Listen {
    Off,
    At(SocketAddr),
}

pub(super) fn parse_listen(text: &str) -> Result<Listen, String> {
    if text == "off" {
        return Ok(Listen::Off);
    }
    text.parse()
        .map(Listen::At)
        .map_err(|e| format!("{e}: give HOST:PORT (e.g. 0.0.0.0:8080) or off"))
}
