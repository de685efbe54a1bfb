//! The bounds on one request ([`InputLimits`]), checked before anything
//! is looked up or allocated for it.

use super::InputLimits;
use crate::api::{RateLimitRequest, RequestError};

/// The request against the input limits (and the shape every request must have).
pub(crate) fn check(req: &RateLimitRequest, limits: &InputLimits) -> Result<(), RequestError> {
    let too_large = |what: String, limit: usize| Err(RequestError::TooLarge { what, limit });
    if req.domain.is_empty() {
        return Err(RequestError::EmptyDomain);
    }
    if req.domain.len() > limits.max_bytes {
        return too_large("bytes in the domain".into(), limits.max_bytes);
    }
    if req.descriptors.is_empty() {
        return Err(RequestError::NoDescriptors);
    }
    if req.descriptors.len() > limits.max_descriptors {
        return too_large("descriptors".into(), limits.max_descriptors);
    }
    for (index, d) in req.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(RequestError::EmptyDescriptor { index });
        }
        if d.entries.len() > limits.max_entries {
            return too_large(format!("entries in descriptor {index}"), limits.max_entries);
        }
        let long = |s: &String| s.len() > limits.max_bytes;
        if d.entries.iter().any(|(k, v)| long(k) || long(v)) {
            return too_large(
                format!("bytes in a key or value of descriptor {index}"),
                limits.max_bytes,
            );
        }
    }
    Ok(())
}
