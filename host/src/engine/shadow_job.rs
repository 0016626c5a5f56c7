//! What a candidate in shadow is asked about one reconcile: what the
//! serving call was shown, read and answered, taken as the serving
//! reconcile runs and handed to [`shadow`](super::shadow) once it is over.

use std::sync::Arc;

use super::call::Shown;
use super::failure::Failure;
use super::primary::Primary;
use super::shadow_reads::KeptReads;
use super::shared_cache::SharedCache;
use crate::decision_diff::Decision;
use crate::golden::runner::expectation_of;
use crate::plugin::{LoadedPlugin, ValidResponse};

/// One reconcile to be shadowed: what the serving version was shown and
/// decided, and the candidate to ask.
pub struct ShadowJob {
    pub(super) plugin: String,
    /// Draws its random numbers as the serving version does.
    pub(super) candidate: Arc<LoadedPlugin>,
    pub(super) primary: Primary,
    /// What the candidate is shown: the serving version's children, or its
    /// own when it declares other kinds.
    pub(super) shown: Arc<Shown>,
    pub(super) bucket: Option<String>,
    pub(super) now_millis: i64,
    /// The serving call's reads, answered again to the candidate.
    pub(super) reads: Arc<KeptReads>,
    pub(super) serving: Decision,
}

/// What the serving call was shown and read.
pub struct Seen<'a> {
    pub primary: &'a Primary,
    pub shown: &'a Arc<Shown>,
    pub bucket: Option<&'a str>,
    pub now_millis: i64,
    pub reads: Arc<KeptReads>,
}

impl ShadowJob {
    /// The shadow, by `candidate`, of a reconcile whose serving call was
    /// shown and read `seen` and answered `called`.
    pub fn new(
        cache: &SharedCache,
        serving: &LoadedPlugin,
        candidate: &LoadedPlugin,
        seen: Seen<'_>,
        called: &Result<ValidResponse, Failure>,
    ) -> Self {
        let shown = if candidate.metadata().owns == serving.metadata().owns {
            seen.shown.clone()
        } else {
            Arc::new(Shown::of(
                cache,
                &seen.primary.object,
                &candidate.metadata().owns,
            ))
        };
        Self {
            plugin: serving.name().to_string(),
            candidate: Arc::new(candidate.drawing_random_as(serving)),
            primary: seen.primary.clone(),
            shown,
            bucket: seen.bucket.map(str::to_string),
            now_millis: seen.now_millis,
            reads: seen.reads,
            serving: match called {
                Ok(response) => Ok(expectation_of(response.clone())),
                Err(failure) => Err(failure.message.clone()),
            },
        }
    }
}
