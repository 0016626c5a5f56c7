//! Who may read the reports (`/metrics`, `/plugins`, `/clusters`, `/shards`:
//! [`crate::process::http_server::REPORT_PATHS`]): the client's bearer token is
//! authenticated by the API server (a TokenReview) and the user it names
//! authorized for the request's verb on its path (a SubjectAccessReview of
//! a non-resource URL), as controller-runtime's secure metrics filter does.
//! Access is then granted the Kubernetes way, by a ClusterRole with those
//! `nonResourceURLs` (`deploy/metrics-reader.yaml`) bound to the scraper's
//! service account, and the host needs `create` on tokenreviews and
//! subjectaccessreviews.
//!
//! Answers are kept per token and path ([`ALLOWED_TTL`], [`REFUSED_TTL`]),
//! so a scraper repeating its requests costs no review each time, and at
//! most [`MAX_REVIEWS`] reviews are in flight, so a flood of made-up tokens
//! keeps the API server no busier than that.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

/// How long an allowed request's answer is reused for the same token and
/// path: a revoked binding or token stops working within this time.
pub const ALLOWED_TTL: Duration = Duration::from_secs(30);
/// The same for a refusal: a new binding starts working within this time.
pub const REFUSED_TTL: Duration = Duration::from_secs(5);
/// Reviews sent to the API server at once; more requests wait.
pub const MAX_REVIEWS: usize = 8;
/// Answers kept; past it the expired ones go, and all if none has.
const MAX_VERDICTS: usize = 4096;

/// What the API server said of one token and request.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    /// The token is not valid (unknown, expired, revoked).
    Unauthenticated,
    /// The token is valid, for this user, who may not make the request.
    Forbidden {
        user: String,
    },
}

/// Checks requests against the API server through `client`.
pub struct ApiServerAuth {
    client: kube::Client,
    reviews: Semaphore,
    verdicts: Mutex<HashMap<String, (Verdict, Instant)>>,
}

impl ApiServerAuth {
    pub fn new(client: kube::Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            reviews: Semaphore::new(MAX_REVIEWS),
            verdicts: Mutex::default(),
        })
    }

    async fn verdict(&self, token: &str, verb: &str, path: &str) -> anyhow::Result<Verdict> {
        let key = format!("{:x} {verb} {path}", Sha256::digest(token.as_bytes()));
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let _permit = self.reviews.acquire().await?;
        // Another request may have asked while this one waited.
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token, verb, path).await?;
        let mut verdicts = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
        if verdicts.len() >= MAX_VERDICTS {
            let now = Instant::now();
            verdicts.retain(|_, (_, expires)| *expires > now);
            if verdicts.len() >= MAX_VERDICTS {
                verdicts.clear();
            }
        }
        let ttl = match verdict {
            Verdict::Allowed => ALLOWED_TTL,
            _ => REFUSED_TTL,
        };
        verdicts.insert(key, (verdict.clone(), Instant::now() + ttl));
        Ok(verdict)
    }

    fn cached(&self, key: &str) -> Option<Verdict> {
        let verdicts = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
        verdicts
            .get(key)
            .filter(|(_, expires)| *expires > Instant::now())
            .map(|(verdict, _)| verdict.clone())
    }

    async fn review(&self, token: &str, verb: &str, path: &str) -> anyhow::Result<Verdict> {
        let tokens: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = tokens
            .create(&PostParams::default(), &review)
            .await
            .context("cannot create a TokenReview (the host needs create on tokenreviews.authentication.k8s.io)")?;
        let status = reviewed.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => return Ok(Verdict::Unauthenticated),
        };
        let access: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let reviewed = access
            .create(&PostParams::default(), &review)
            .await
            .context("cannot create a SubjectAccessReview (the host needs create on subjectaccessreviews.authorization.k8s.io)")?;
        Ok(match reviewed.status {
            Some(status) if status.allowed => Verdict::Allowed,
            _ => Verdict::Forbidden {
                user: user.username.unwrap_or_default(),
            },
        })
    }
}

/// The middleware: passes a request on only if the API server allows its
/// token the request; 401 without a valid token, 403 for a user without
/// the right, 503 when the API server cannot say.
pub async fn require_token(
    State(auth): State<Arc<ApiServerAuth>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    // As the API server names HTTP methods for non-resource URLs.
    let verb = request.method().as_str().to_ascii_lowercase();
    let Some(token) = bearer_token(&request) else {
        return unauthorized("send a ServiceAccount token: Authorization: Bearer <token>");
    };
    match auth.verdict(&token, &verb, &path).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => {
            unauthorized("the API server did not authenticate the bearer token")
        }
        Ok(Verdict::Forbidden { user }) => (
            StatusCode::FORBIDDEN,
            format!(
                "{user} may not {verb} {path}: grant it in a ClusterRole (nonResourceURLs: [\"{path}\"], verbs: [\"{verb}\"]) bound to {user}\n"
            ),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!("cannot check a request for {path} with the API server: {e:#}");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot check the token with the API server: {e:#}\n"),
            )
                .into_response()
        }
    }
}

fn bearer_token(request: &Request) -> Option<String> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

fn unauthorized(why: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        format!("{why}\n"),
    )
        .into_response()
}
