//! Carrying the remainder across process boundaries.

use std::time::Duration;

use super::Deadline;
use crate::clock::Instant;

/// The header that carries the remaining milliseconds of the caller's
/// deadline to a tool, provider or child process.
///
/// Remaining milliseconds, not an absolute time: the two processes' clocks
/// need not agree, and the transit time only makes the callee more
/// conservative.
pub const DEADLINE_HEADER: &str = "Rein-Deadline-Ms";

/// The longest value accepted, in digits (u64 milliseconds has 20).
const MAX_DIGITS: usize = 20;

/// A `Rein-Deadline-Ms` header that could not be adopted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The request carried no deadline; the callee must not invent one.
    #[error(
        "the {DEADLINE_HEADER} header is missing; the caller must send its remaining milliseconds"
    )]
    Missing,
    /// The value was not a non-negative integer number of milliseconds.
    #[error(
        "the {DEADLINE_HEADER} header must be a non-negative integer number of milliseconds, but it is {value:?}"
    )]
    Malformed {
        /// The refused value.
        value: String,
    },
}

impl Deadline {
    /// The header value for this deadline at `now`: the whole milliseconds
    /// left, rounded down so the callee never believes it has more time than
    /// the caller.
    pub fn to_header(&self, now: Instant) -> String {
        let ms = self.remaining(now).as_millis();
        ms.min(u128::from(u64::MAX)).to_string()
    }

    /// Adopts a caller's deadline from its header value, as received at
    /// `now`. `"0"` is a valid, already expired deadline.
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] when `value` is `None`, and
    /// [`HeaderError::Malformed`] when it is not a plain non-negative
    /// integer (no sign, no fraction, no unit, at most 20 digits).
    pub fn from_header(value: Option<&str>, now: Instant) -> Result<Deadline, HeaderError> {
        let raw = value.ok_or(HeaderError::Missing)?;
        let trimmed = raw.trim();
        let malformed = || HeaderError::Malformed {
            value: raw.to_owned(),
        };
        if trimmed.is_empty()
            || trimmed.len() > MAX_DIGITS
            || !trimmed.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(malformed());
        }
        let ms: u64 = trimmed.parse().map_err(|_| malformed())?;
        Ok(Deadline::after(now, Duration::from_millis(ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn header_round_trips_the_remaining_milliseconds() {
        let d = Deadline::after(t(0), Duration::from_millis(2500));
        let value = d.to_header(t(1000));
        assert_eq!(value, "1500");
        let adopted = Deadline::from_header(Some(&value), t(50_000)).unwrap();
        assert_eq!(adopted.remaining(t(50_000)), Duration::from_millis(1500));
    }

    #[test]
    fn header_rounds_down_partial_milliseconds() {
        let d = Deadline::after(t(0), Duration::from_micros(1999));
        assert_eq!(d.to_header(t(0)), "1");
    }

    #[test]
    fn header_of_an_expired_deadline_is_zero_and_adopts_as_expired() {
        let d = Deadline::after(t(0), Duration::from_millis(5));
        assert_eq!(d.to_header(t(10)), "0");
        assert!(
            Deadline::from_header(Some("0"), t(3))
                .unwrap()
                .is_expired(t(3))
        );
    }

    #[test]
    fn missing_header_is_a_clear_error() {
        let err = Deadline::from_header(None, t(0)).unwrap_err();
        assert_eq!(err, HeaderError::Missing);
        assert!(
            err.to_string()
                .contains("Rein-Deadline-Ms header is missing")
        );
    }

    #[test]
    fn malformed_header_is_a_clear_error() {
        for bad in [
            "",
            " ",
            "-5",
            "+5",
            "1.5",
            "10ms",
            "abc",
            "999999999999999999999",
            "1 2",
        ] {
            let err = Deadline::from_header(Some(bad), t(0)).unwrap_err();
            assert_eq!(
                err,
                HeaderError::Malformed {
                    value: bad.to_owned()
                },
                "{bad:?}"
            );
        }
        assert!(Deadline::from_header(Some(" 42 "), t(0)).is_ok());
    }
}
