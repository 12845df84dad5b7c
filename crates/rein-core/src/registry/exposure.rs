//! Who may reach `rein serve`: the host names it answers for, the browser
//! origins it admits, and who may read `/metrics` (`server.allowed_hosts`,
//! `[server.cors]`, `server.metrics` and `server.metrics_tenants`).
//!
//! # Why
//!
//! A server on loopback is not safe from the network just because it is on
//! loopback: every web page the operator opens can send it requests. A
//! `fetch(..., {mode: "no-cors"})` or a form POST with `text/plain` needs no
//! preflight, and DNS rebinding (a name the attacker controls, re-pointed at
//! 127.0.0.1) lets a page read the answers too. Both carry tell-tale
//! headers a browser always sets and a page cannot forge: the `Host` is
//! the attacker's name, and the `Origin` is the attacker's page. So every
//! request's `Host` must be loopback or listed, and a present `Origin` must
//! be this server's own origin or one the operator listed for CORS.
//!
//! The types here are pure: they parse and compare the text of headers and
//! config; `rein-server` applies them to requests.
//!
//! # Matching
//!
//! | form | matches |
//! | --- | --- |
//! | loopback (always allowed) | `localhost`, `127.0.0.0/8`, `[::1]` (and `[::ffff:127.x.y.z]`), any port |
//! | `rein.example.com` | that name, any port (or none) |
//! | `rein.example.com:8443` | that name with exactly that port |
//! | `*.example.com` | any name below `example.com` (not `example.com` itself), any port |
//! | `10.0.0.5`, `[fd00::5]:8787` | that address (any port, or exactly that port) |
//!
//! Names compare case-insensitively and without one trailing dot
//! (`LocalHost.` is `localhost`); addresses compare by value.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use schemars::JsonSchema;
use serde::Deserialize;

/// The longest host name accepted (RFC 1035's 253 characters).
const MAX_NAME_LENGTH: usize = 253;
/// The longest label of a host name (RFC 1035).
const MAX_LABEL_LENGTH: usize = 63;

/// A host as a `Host` header, an `Origin` or the config writes it,
/// normalized: a name in lowercase without a trailing dot, an IP address
/// in its canonical text (IPv6 in brackets).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostName(String);

impl HostName {
    /// `text` as a host, if it is a DNS name (letters, digits, `-`, `_`,
    /// dot-separated labels, the last one not a number), an IPv4 address in
    /// its canonical dotted-decimal text, or an IPv6 address in brackets
    /// (without a zone).
    ///
    /// # Why no numeric last label
    ///
    /// A name whose last label is a number (`127.1`, `10.0.0.05`, `0x7f.1`,
    /// `2130706433`) is no DNS name: a browser reads it as an IPv4 address
    /// (WHATWG URL's "ends in a number") and sends the canonical address in
    /// `Host`. Taken as a name it would never match anything, so it is
    /// refused here, and [`AllowedHost::parse`] suggests the address.
    pub fn parse(text: &str) -> Option<HostName> {
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner.strip_suffix(']')?;
            let addr: Ipv6Addr = inner.parse().ok()?;
            return Some(HostName(format!("[{addr}]")));
        }
        // One trailing dot is the root of the DNS: `localhost.` is
        // `localhost`.
        let text = text.strip_suffix('.').unwrap_or(text);
        if let Ok(addr) = text.parse::<Ipv4Addr>() {
            return Some(HostName(addr.to_string()));
        }
        if text.is_empty() || text.len() > MAX_NAME_LENGTH || ends_in_a_number(text) {
            return None;
        }
        let label_ok = |label: &str| {
            (1..=MAX_LABEL_LENGTH).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        text.split('.')
            .all(label_ok)
            .then(|| HostName(text.to_ascii_lowercase()))
    }

    /// The normalized text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The IP address, when the host is one.
    pub fn ip(&self) -> Option<IpAddr> {
        let text = self.0.as_str();
        match text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            Some(v6) => v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
            None => text.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        }
    }

    /// Whether this host is this machine for certain: `localhost`, an
    /// address of `127.0.0.0/8`, `::1`, or an IPv4-mapped loopback address.
    /// Names below `localhost` (`a.localhost`) are not: resolvers differ on
    /// them.
    pub fn is_loopback(&self) -> bool {
        match self.ip() {
            Some(IpAddr::V4(v4)) => v4.is_loopback(),
            Some(IpAddr::V6(v6)) => {
                v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
            None => self.0 == "localhost",
        }
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether the last label of `name` is a number: only ASCII digits, or
/// `0x`/`0X` and hex digits (WHATWG URL's "ends in a number"), which makes
/// it an IPv4 address to a browser, never a name.
fn ends_in_a_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The IPv4 address a browser reads `text` as (WHATWG URL's IPv4 parser:
/// one to four parts, each decimal, `0`-prefixed octal or `0x` hex, the
/// last filling the remaining bytes), if it is one.
fn browser_ipv4(text: &str) -> Option<Ipv4Addr> {
    let text = text.strip_suffix('.').unwrap_or(text);
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in parts {
        let (digits, radix) = match part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            Some(hex) => (hex, 16),
            None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
            None if part.is_empty() => return None,
            None => (part, 10),
        };
        if !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        let number = if digits.is_empty() {
            0
        } else {
            u64::from_str_radix(digits, radix).ok()?
        };
        numbers.push(number);
    }
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    // `init.len()` is at most 3, so the last part has 1 to 4 bytes.
    let last_bytes = 4 - init.len();
    if *last >= 1u64 << (8 * last_bytes) {
        return None;
    }
    let mut value = *last;
    for (i, n) in init.iter().enumerate() {
        value += n << (8 * (3 - i));
    }
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// A host and an optional port, as in a `Host` header (`name`,
/// `name:8787`, `[::1]:8787`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// The host.
    pub host: HostName,
    /// The port, when one is written (an empty port, `name:`, is none).
    pub port: Option<u16>,
}

impl Authority {
    /// `text` as an authority, if it is one without user info.
    pub fn parse(text: &str) -> Option<Authority> {
        let (host, port) = if text.starts_with('[') {
            let end = text.find(']')?;
            let (host, rest) = text.split_at(end + 1);
            match rest {
                "" => (host, None),
                rest => (host, Some(rest.strip_prefix(':')?)),
            }
        } else {
            match text.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        let port = match port {
            None | Some("") => None,
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
            Some(_) => return None,
        };
        Some(Authority {
            host: HostName::parse(host)?,
            port,
        })
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => write!(f, "{}", self.host),
        }
    }
}

/// The scheme of an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `http`, default port 80.
    Http,
    /// `https`, default port 443.
    Https,
}

impl Scheme {
    /// The port an authority without one means.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A web origin (`scheme://host[:port]`, RFC 6454), as a browser sends it
/// in `Origin` and as `server.cors.allowed_origins` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// The host.
    pub host: HostName,
    /// The port, the scheme's default when none is written.
    pub port: u16,
}

impl Origin {
    /// `text` as an origin, if it is `http(s)://authority` with no path,
    /// query or fragment. `null` (a sandboxed or opaque origin) is none.
    pub fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.split_once("://")?;
        let scheme = if scheme.eq_ignore_ascii_case("http") {
            Scheme::Http
        } else if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else {
            return None;
        };
        let authority = Authority::parse(rest)?;
        Some(Origin {
            scheme,
            port: authority.port.unwrap_or(scheme.default_port()),
            host: authority.host,
        })
    }

    /// Whether this is the origin of a page served by the authority a
    /// request was sent to: same host, and the same port (the scheme's
    /// default when the request names none, since behind a TLS proxy the
    /// server cannot tell the scheme itself).
    pub fn is_same_as(&self, authority: &Authority) -> bool {
        self.host == authority.host
            && authority.port.unwrap_or(self.scheme.default_port()) == self.port
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        if self.port == self.scheme.default_port() {
            write!(f, "{scheme}://{}", self.host)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// What an [`AllowedHost`] matches by name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostPattern {
    /// Exactly this host.
    Exact(HostName),
    /// Any name below this one (`*.example.com`), not the name itself.
    Below(HostName),
}

/// One entry of `server.allowed_hosts`: a host the API answers for besides
/// loopback, with any port or exactly one.
///
/// | form | matches |
/// | --- | --- |
/// | loopback (always allowed, no entry needed) | `localhost`, `127.0.0.0/8`, `[::1]` (and `[::ffff:127.x.y.z]`), any port |
/// | `rein.example.com` | that name, any port (or none) |
/// | `rein.example.com:8443` | that name with exactly that port |
/// | `*.example.com` | any name below `example.com` (not `example.com` itself), any port |
/// | `10.0.0.5`, `[fd00::5]:8787` | that address (any port, or exactly that port) |
///
/// Names compare case-insensitively and without one trailing dot;
/// addresses compare by value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// The host, or the domain whose subdomains are allowed.
    pub pattern: HostPattern,
    /// Only this port, when set.
    pub port: Option<u16>,
}

/// The entry as config writes it: `rein.example.com`, `*.example.com:8443`,
/// `[fd00::5]`.
impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (below, host) = match &self.pattern {
            HostPattern::Exact(host) => ("", host.as_str()),
            HostPattern::Below(host) => ("*.", host.as_str()),
        };
        let bracketed = host.contains(':') && !host.starts_with('[');
        match (bracketed, self.port) {
            (true, Some(port)) => write!(f, "{below}[{host}]:{port}"),
            (true, None) => write!(f, "{below}[{host}]"),
            (false, Some(port)) => write!(f, "{below}{host}:{port}"),
            (false, None) => write!(f, "{below}{host}"),
        }
    }
}

impl AllowedHost {
    /// An entry as config writes it (see the table above).
    ///
    /// # Errors
    ///
    /// What is wrong with `text`, for `rein check` to show under the field.
    pub fn parse(text: &str) -> Result<AllowedHost, String> {
        if text.contains("://") {
            return Err(format!(
                "must be a host name or host:port without a scheme, but it is `{text}`"
            ));
        }
        if text.contains(['/', '?', '#']) {
            return Err(format!(
                "must be a host name or host:port without a path, but it is `{text}`"
            ));
        }
        let (below, rest) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if rest.contains('*') {
            return Err(format!(
                "may hold a wildcard only as a leading `*.` (any name below a domain), but it is `{text}`"
            ));
        }
        let authority = Authority::parse(rest).ok_or_else(|| {
            let (host, port) = match rest.rsplit_once(':') {
                Some((host, port)) if !rest.starts_with('[') => (host, format!(":{port}")),
                _ => (rest, String::new()),
            };
            let host = host.strip_suffix('.').unwrap_or(host);
            if rest.starts_with('[') || !ends_in_a_number(host) {
                format!(
                    "must be a host name, an IP address or either with `:port` (like \"rein.example.com\", \"10.0.0.5:8787\" or \"[fd00::5]\"), but it is `{text}`"
                )
            } else if let Some(ip) = browser_ipv4(host) {
                format!(
                    "must be an address in its canonical form, \"{ip}{port}\" (what clients send in Host for it): a last label that is a number makes no host name, but it is `{text}`"
                )
            } else {
                format!(
                    "must be a host name whose last label is not a number, or an IPv4 address like \"10.0.0.5\", but it is `{text}`"
                )
            }
        })?;
        if below && authority.host.ip().is_some() {
            return Err(format!(
                "`*.` must be followed by a domain name, not an address, but it is `{text}`"
            ));
        }
        Ok(AllowedHost {
            pattern: if below {
                HostPattern::Below(authority.host)
            } else {
                HostPattern::Exact(authority.host)
            },
            port: authority.port,
        })
    }

    /// The entry for the address `ip`, any port: what `rein serve` adds for
    /// the specific address it listens on (a client, or a probe, that
    /// reaches it by address names it in `Host`; a rebinding page names
    /// its own domain instead).
    pub fn for_address(ip: IpAddr) -> AllowedHost {
        let host = match ip {
            IpAddr::V4(v4) => HostName(v4.to_string()),
            IpAddr::V6(v6) => HostName(format!("[{v6}]")),
        };
        AllowedHost {
            pattern: HostPattern::Exact(host),
            port: None,
        }
    }

    /// Whether a request sent to `authority` is one this entry allows.
    pub fn matches(&self, authority: &Authority) -> bool {
        let host = match &self.pattern {
            HostPattern::Exact(name) => *name == authority.host,
            HostPattern::Below(domain) => {
                authority.host.ip().is_none()
                    && authority
                        .host
                        .as_str()
                        .strip_suffix(domain.as_str())
                        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
            }
        };
        host && self.port.is_none_or(|p| authority.port == Some(p))
    }
}

/// Whether a request sent to `authority` may be answered: its host is
/// loopback, or `allowed` lists it.
pub fn host_is_allowed(allowed: &[AllowedHost], authority: &Authority) -> bool {
    authority.host.is_loopback() || allowed.iter().any(|a| a.matches(authority))
}

/// `[server.cors]`, validated: the browser origins other than the server's
/// own that may call the API, and what they may send.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CorsSpec {
    /// The origins admitted; never empty, never `*` or `null`.
    pub allowed_origins: Vec<Origin>,
    /// The methods they may use, uppercase: a subset of `GET`, `POST`.
    pub allowed_methods: Vec<String>,
    /// The request headers they may send, lowercase.
    pub allowed_headers: Vec<String>,
}

impl CorsSpec {
    /// Whether `origin` is listed.
    pub fn admits(&self, origin: &Origin) -> bool {
        self.allowed_origins.contains(origin)
    }

    /// Whether a listed origin may send `method`: a preflight, `OPTIONS`,
    /// always may (it is how a browser asks), and `HEAD` whenever `GET`
    /// may (it is a `GET` without the body; the router answers both).
    pub fn allows_method(&self, method: &str) -> bool {
        let method = if method == "HEAD" { "GET" } else { method };
        method == "OPTIONS" || self.allowed_methods.iter().any(|m| m == method)
    }
}

/// Who may read `/metrics` (`server.metrics`).
///
/// # Why protected means listed tenants
///
/// The counters are the process's, not a tenant's: they are labelled by
/// tool, provider and model, so any tenant's key reading them would learn
/// what every other tenant runs. Protected `/metrics` is read only with the
/// key of a tenant named in `server.metrics_tenants` (an operator's `ops`
/// tenant, say); with none named, no key reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum MetricsAccess {
    /// With `[[server.api_keys]]` configured, only the key of a tenant in
    /// `server.metrics_tenants` (in open mode there are no keys to need).
    #[default]
    Protected,
    /// Anyone who can reach the server (a scraper without a key).
    Open,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority(text: &str) -> Authority {
        Authority::parse(text).unwrap_or_else(|| panic!("{text} parses"))
    }

    #[test]
    fn loopback_hosts_are_recognized_in_every_spelling() {
        for (text, loopback) in [
            ("localhost", true),
            ("LocalHost.", true),
            ("localhost:8787", true),
            ("127.0.0.1", true),
            ("127.3.4.5:1", true),
            ("[::1]", true),
            ("[::1]:8787", true),
            ("[0:0:0:0:0:0:0:1]", true),
            ("[::ffff:127.0.0.1]:80", true),
            ("a.localhost", false),
            ("localhost.evil.example", false),
            ("evil.example", false),
            ("128.0.0.1", false),
            ("[::2]", false),
        ] {
            assert_eq!(authority(text).host.is_loopback(), loopback, "{text}");
        }
    }

    #[test]
    fn authorities_that_are_not_hosts_are_refused() {
        for bad in [
            "",
            ":80",
            "user@localhost",
            "local host",
            "localhost:http",
            "localhost:99999",
            "[::1",
            "[::1]x",
            "[fe80::1%25eth0]",
            "::1",
            "a..b",
            "évil.example",
            "1.2.3.4:5:6",
            // A numeric last label is an address to a browser, never a name.
            "2130706433",
            "127.1",
            "10.0.0.05",
            "0x7f.1:80",
            "rein.example.123",
            "rein.0x1f",
        ] {
            assert_eq!(Authority::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            authority("Rein.Example.COM.:8443").to_string(),
            "rein.example.com:8443"
        );
        assert_eq!(authority("localhost:").port, None, "an empty port is none");
    }

    #[test]
    fn allowed_hosts_match_by_name_port_and_subdomain() {
        let table = [
            ("rein.example.com", "rein.example.com", true),
            ("rein.example.com", "REIN.example.com.:9000", true),
            ("rein.example.com", "evil.example.com", false),
            ("rein.example.com:8443", "rein.example.com:8443", true),
            ("rein.example.com:8443", "rein.example.com:8444", false),
            ("rein.example.com:8443", "rein.example.com", false),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "a.b.example.com:1", true),
            ("*.example.com", "example.com", false),
            ("*.example.com", "badexample.com", false),
            ("10.0.0.5", "10.0.0.5:8787", true),
            ("[fd00::5]:8787", "[fd00:0::5]:8787", true),
            ("[fd00::5]:8787", "[fd00::5]:1", false),
        ];
        for (entry, host, expected) in table {
            let allowed = AllowedHost::parse(entry).unwrap();
            assert_eq!(
                allowed.matches(&authority(host)),
                expected,
                "{entry} vs {host}"
            );
        }
    }

    #[test]
    fn allowed_host_entries_with_a_scheme_path_or_inner_wildcard_are_refused() {
        for (bad, says) in [
            ("http://rein.example.com", "without a scheme"),
            ("rein.example.com/api", "without a path"),
            ("rein.*.com", "leading `*.`"),
            ("*", "leading `*.`"),
            ("*.10.0.0.5", "not an address"),
            ("rein example", "must be a host name"),
            ("", "must be a host name"),
            ("rein.example.123", "last label is not a number"),
        ] {
            let err = AllowedHost::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn numeric_allowed_hosts_are_refused_with_the_address_a_client_sends() {
        for (bad, canonical) in [
            ("10.0.0.05", "\"10.0.0.5\""),
            ("127.1", "\"127.0.0.1\""),
            ("127.1:8787", "\"127.0.0.1:8787\""),
            ("0x7f.0.0.1", "\"127.0.0.1\""),
            ("2130706433", "\"127.0.0.1\""),
            ("010.0.0.1.", "\"8.0.0.1\""),
        ] {
            let err = AllowedHost::parse(bad).unwrap_err();
            assert!(err.contains(canonical), "{bad}: {err}");
            assert!(err.contains(&format!("`{bad}`")), "{bad}: {err}");
        }
        for (text, ip) in [
            ("0x", Some("0.0.0.0")),
            ("1.2.3.4", Some("1.2.3.4")),
            ("1.65535", Some("1.0.255.255")),
            ("1.65536.1", None),
            ("256.1.1.1", None),
            ("1.2.3.4.5", None),
            ("09.1", None),
            ("1..2", None),
        ] {
            assert_eq!(
                browser_ipv4(text).map(|a| a.to_string()).as_deref(),
                ip,
                "{text}"
            );
        }
    }

    #[test]
    fn an_entry_for_the_listen_address_matches_it_on_any_port() {
        let v4 = AllowedHost::for_address("10.0.0.5".parse().unwrap());
        assert!(v4.matches(&authority("10.0.0.5:8787")));
        assert!(v4.matches(&authority("10.0.0.5")));
        assert!(!v4.matches(&authority("10.0.0.6:8787")));
        let v6 = AllowedHost::for_address("fd00::5".parse().unwrap());
        assert!(v6.matches(&authority("[fd00:0::5]:8787")));
    }

    #[test]
    fn head_is_allowed_wherever_get_is_and_options_always() {
        let cors = CorsSpec {
            allowed_origins: vec![Origin::parse("http://app.example").unwrap()],
            allowed_methods: vec!["GET".into()],
            allowed_headers: Vec::new(),
        };
        assert!(cors.allows_method("GET"));
        assert!(cors.allows_method("HEAD"));
        assert!(cors.allows_method("OPTIONS"));
        assert!(!cors.allows_method("POST"));
        assert!(!cors.allows_method("DELETE"));
        let post_only = CorsSpec {
            allowed_methods: vec!["POST".into()],
            ..cors
        };
        assert!(!post_only.allows_method("HEAD"));
    }

    #[test]
    fn host_is_allowed_when_loopback_or_listed() {
        let allowed = vec![AllowedHost::parse("rein.internal").unwrap()];
        assert!(host_is_allowed(&allowed, &authority("127.0.0.1:8787")));
        assert!(host_is_allowed(&allowed, &authority("rein.internal:8787")));
        assert!(!host_is_allowed(&allowed, &authority("evil.example")));
        assert!(!host_is_allowed(&[], &authority("rein.internal")));
    }

    #[test]
    fn origins_parse_with_default_ports_and_compare_to_the_request_authority() {
        let o = Origin::parse("http://127.0.0.1:8787").unwrap();
        assert!(o.is_same_as(&authority("127.0.0.1:8787")));
        assert!(
            !o.is_same_as(&authority("127.0.0.1:9999")),
            "another port is another origin"
        );
        assert!(
            !o.is_same_as(&authority("localhost:8787")),
            "another name is another origin"
        );
        let tls = Origin::parse("https://rein.example.com").unwrap();
        assert_eq!(tls.port, 443);
        assert!(tls.is_same_as(&authority("rein.example.com")));
        assert!(tls.is_same_as(&authority("rein.example.com:443")));
        assert_eq!(tls.to_string(), "https://rein.example.com");
        for bad in [
            "null",
            "file://",
            "ftp://x",
            "http://x/",
            "http://x/path",
            "http://",
            "x",
        ] {
            assert_eq!(Origin::parse(bad), None, "{bad}");
        }
    }
}
