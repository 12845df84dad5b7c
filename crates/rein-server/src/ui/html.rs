//! HTML written by hand: a string builder whose only way to take text that
//! is not a literal is to escape it.
//!
//! # Why not a template crate
//!
//! The dashboard is a handful of pages of tables and forms. `maud` or
//! `askama` would add a proc-macro crate to every build of the server for
//! what one escaping function does; and [`Html::raw`] taking only
//! `&'static str` gives the property a template engine is chosen for: text
//! from a run, a tool or a request can reach the page only through
//! [`Html::text`], escaped.

use std::fmt::Write as _;

/// A page, or part of one, being written.
#[derive(Debug, Default)]
pub(crate) struct Html(String);

impl Html {
    /// An empty fragment.
    pub(crate) fn new() -> Html {
        Html(String::with_capacity(4096))
    }

    /// Markup written in this crate: only literals, never data.
    pub(crate) fn raw(&mut self, markup: &'static str) -> &mut Html {
        self.0.push_str(markup);
        self
    }

    /// Text (or an attribute value between double quotes), escaped.
    pub(crate) fn text(&mut self, text: &str) -> &mut Html {
        escape_into(&mut self.0, text);
        self
    }

    /// A number: nothing to escape.
    pub(crate) fn num(&mut self, n: impl Into<u64>) -> &mut Html {
        let _ = write!(self.0, "{}", n.into());
        self
    }

    /// A fragment built apart.
    pub(crate) fn html(&mut self, fragment: Html) -> &mut Html {
        self.0.push_str(&fragment.0);
        self
    }

    /// A `<time>` for Unix milliseconds: UTC ISO 8601 in the markup, which
    /// the page's script shows in the viewer's zone (UTC on hover).
    pub(crate) fn time(&mut self, ms: u64) -> &mut Html {
        let iso = iso_utc(ms);
        self.raw("<time datetime=\"")
            .text(&iso)
            .raw("\" title=\"")
            .text(&iso)
            .raw("\">")
            .text(&iso)
            .raw("</time>")
    }

    /// The markup.
    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

/// Escapes the five characters that matter in text and in quoted
/// attribute values.
pub(crate) fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// `text` percent-encoded for a path segment or a query value: every byte
/// but the unreserved ones (RFC 3986 §2.3).
pub(crate) fn pct(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn iso_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The Unix milliseconds of the start (00:00 UTC) of `date`, written
/// `YYYY-MM-DD` (as an `<input type="date">` sends it); `None` for anything
/// else, or a date before 1970.
pub(crate) fn utc_day_ms(date: &str) -> Option<u64> {
    let mut parts = date.splitn(3, '-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, u32, u32) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    if !(1..=12).contains(&m) || d == 0 || d > 31 {
        return None;
    }
    let days = days_from_civil(y, m, d);
    // A day that does not exist (31 April) comes back as another date.
    if civil_from_days(days) != (y, m, d) {
        return None;
    }
    u64::try_from(days).ok()?.checked_mul(86_400_000)
}

/// Howard Hinnant's `days_from_civil`: the day count from 1970-01-01 of a
/// proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's `civil_from_days`: the proleptic Gregorian date of a
/// day count from 1970-01-01 (written here rather than pulling in a date
/// crate for one conversion).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

/// A duration in milliseconds, with its unit: `850 ms`, `12.4 s`,
/// `3 min 05 s`, `2 h 07 min`.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", ms / 1000, ms % 1000 / 100),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{} h {:02} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// A size in bytes, with its unit: `900 bytes`, `64 KiB`, `1.5 MiB`.
pub(crate) fn bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    match n {
        0..KIB => format!("{n} bytes"),
        KIB..MIB if n % KIB == 0 => format!("{} KiB", n / KIB),
        KIB..MIB => format!("{:.1} KiB", n as f64 / KIB as f64),
        _ if n % MIB == 0 => format!("{} MiB", n / MIB),
        _ => format!("{:.1} MiB", n as f64 / MIB as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_raw_is_kept() {
        let mut h = Html::new();
        h.raw("<td title=\"")
            .text("\"><script>alert('x')</script>&")
            .raw("\">");
        assert_eq!(
            h.into_string(),
            "<td title=\"&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;\">"
        );
    }

    #[test]
    fn a_segment_keeps_only_unreserved_bytes() {
        assert_eq!(pct("a-1_b.c~"), "a-1_b.c~");
        assert_eq!(pct("a/b?c=d&é"), "a%2Fb%3Fc%3Dd%26%C3%A9");
    }

    #[test]
    fn times_are_utc_iso_and_durations_have_units() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_day_ms("2026-01-01"), Some(1_767_225_600_000));
        assert_eq!(utc_day_ms("2000-02-29"), Some(951_782_400_000));
        assert_eq!(utc_day_ms("1970-01-01"), Some(0));
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "1969-12-31",
            "2026-1-01",
            "x",
            "",
        ] {
            assert_eq!(utc_day_ms(bad), None, "{bad}");
        }
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_400), "12.4 s");
        assert_eq!(duration(185_000), "3 min 05 s");
        assert_eq!(duration(7_620_000), "2 h 07 min");
        assert_eq!(bytes(900), "900 bytes");
        assert_eq!(bytes(64 * 1024), "64 KiB");
        assert_eq!(bytes(1_048_576), "1 MiB");
        assert_eq!(bytes(1_572_864), "1.5 MiB");
    }
}
