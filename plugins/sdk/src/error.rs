/// Why a reconcile failed. The host records the message as a Warning Event on
/// the primary object and retries with backoff; nothing of the call is applied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin's own judgement: the object cannot be reconciled now.
    #[error("{0}")]
    Message(String),
    /// Text from the host or cache could not be parsed into the asked type.
    #[error("cannot parse {what}: {source}")]
    Parse {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A value could not be serialised into the response.
    #[error("cannot serialise {what}: {source}")]
    Serialize {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// The host refused a cache call (for example, an undeclared kind).
    #[error("host: {0}")]
    Host(String),
}

impl Error {
    /// An error in the plugin's own words.
    pub fn msg(message: impl Into<String>) -> Self {
        Error::Message(message.into())
    }

    pub(crate) fn parse(what: &str, source: serde_json::Error) -> Self {
        Error::Parse {
            what: what.to_string(),
            source,
        }
    }
}
