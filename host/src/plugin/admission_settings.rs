//! The admission declaration a plugin makes, checked when it loads: apart
//! from the admission call itself, because loading (`sandbox`) and the
//! load errors (`errors`) need the check and not the call.

use reconciler_contract::AdmissionSettings;

/// Longest admission deadline a plugin may declare: the API server's own
/// webhook timeout is at most 30 s, and it waits for every webhook in turn.
pub const MAX_ADMISSION_TIMEOUT_MS: u32 = 10_000;

/// A declaration the host refuses at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "admission settings: timeoutMs is {asked}, outside 1..={MAX_ADMISSION_TIMEOUT_MS} (the API server waits for admission)"
)]
pub struct InvalidAdmissionSettings {
    pub asked: u32,
}

/// Checks a declaration before the host serves it.
pub fn check_settings(settings: &AdmissionSettings) -> Result<(), InvalidAdmissionSettings> {
    match settings.timeout_ms {
        Some(ms) if ms == 0 || ms > MAX_ADMISSION_TIMEOUT_MS => {
            Err(InvalidAdmissionSettings { asked: ms })
        }
        _ => Ok(()),
    }
}
