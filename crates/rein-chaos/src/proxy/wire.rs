//! HTTP/1.1 on the client side of the proxy, by hand: reading a request
//! head and body, encoding answers.
//!
//! Hand-written rather than a server framework because the faults need
//! byte-level control: a reset with nothing written, headers and then
//! silence, a body cut at a chosen byte.

use std::io::ErrorKind;

use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use super::constants::{MAX_HEAD_BYTES, MAX_HEADERS, MAX_REQUEST_BODY_BYTES};

/// A parsed request head, with the bytes read past it.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) method: String,
    /// The request target as received: path and query.
    pub(crate) target: String,
    /// Header names as received, with raw values.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    /// Bytes read after the head: the start of the body.
    pub(crate) rest: Vec<u8>,
}

impl Head {
    /// The first value of header `name` (case-insensitive), as lossy text.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_owned())
    }

    /// Every value of header `name` (case-insensitive).
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// How reading a request head ended.
#[derive(Debug)]
pub(crate) enum HeadRead {
    /// A complete head.
    Head(Head),
    /// Bytes that are not an HTTP/1.x request head.
    Malformed(String),
    /// A head longer than [`MAX_HEAD_BYTES`].
    TooLarge,
    /// The client closed (or the socket failed) before a complete head.
    Closed,
}

/// Reads until a complete request head has arrived.
pub(crate) async fn read_head<R: AsyncRead + Unpin>(stream: &mut R) -> HeadRead {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return HeadRead::Closed,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let (Some(method), Some(target)) = (request.method, request.path) else {
                    return HeadRead::Malformed("request line is incomplete".to_owned());
                };
                let headers = request
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), h.value.to_vec()))
                    .collect();
                return HeadRead::Head(Head {
                    method: method.to_owned(),
                    target: target.to_owned(),
                    headers,
                    rest: buf.get(len..).unwrap_or_default().to_vec(),
                });
            }
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
                return HeadRead::TooLarge;
            }
            Ok(httparse::Status::Partial) => {}
            Err(err) => return HeadRead::Malformed(format!("request head: {err}")),
        }
    }
}

/// How the request body is delimited.
#[derive(Debug, PartialEq)]
pub(crate) enum Framing {
    /// `Content-Length` bytes (0 without the header); `declared` tells
    /// whether the header was there.
    Length { len: usize, declared: bool },
    /// A framing this proxy does not do (chunked or any transfer coding):
    /// 501.
    Unsupported(String),
    /// Contradictory or unreadable framing: 400.
    Malformed(String),
    /// A body over [`MAX_REQUEST_BODY_BYTES`]: 413.
    TooLarge(usize),
}

/// How the body of the request with `head` is delimited.
pub(crate) fn framing(head: &Head) -> Framing {
    if let Some(coding) = head.header_values("transfer-encoding").next() {
        return Framing::Unsupported(format!(
            "request bodies must use Content-Length, but Transfer-Encoding is {:?}",
            String::from_utf8_lossy(coding)
        ));
    }
    let mut found: Option<usize> = None;
    for value in head.header_values("content-length") {
        let text = String::from_utf8_lossy(value);
        for item in text.split(',') {
            let item = item.trim();
            let parsed = if !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()) {
                item.parse::<usize>().ok()
            } else {
                None
            };
            let Some(len) = parsed else {
                return Framing::Malformed(format!(
                    "Content-Length must be a decimal number, but {item:?} is not"
                ));
            };
            match found {
                Some(previous) if previous != len => {
                    return Framing::Malformed(format!(
                        "Content-Length values must agree, but {previous} and {len} do not"
                    ));
                }
                _ => found = Some(len),
            }
        }
    }
    match found {
        Some(len) if len > MAX_REQUEST_BODY_BYTES => Framing::TooLarge(len),
        Some(len) => Framing::Length {
            len,
            declared: true,
        },
        None => Framing::Length {
            len: 0,
            declared: false,
        },
    }
}

/// Whether the client waits for `100 Continue` before sending its body.
pub(crate) fn expects_continue(head: &Head) -> bool {
    head.header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

/// Reads the rest of a `len`-byte body after `head`; `None` when the client
/// closes first.
pub(crate) async fn read_body<R: AsyncRead + Unpin>(
    stream: &mut R,
    mut body: Vec<u8>,
    len: usize,
) -> Option<Vec<u8>> {
    // Bytes past the body would be a pipelined request, which this proxy
    // does not serve: it answers one request per connection.
    body.truncate(len);
    let mut chunk = [0u8; 8192];
    while body.len() < len {
        let want = (len - body.len()).min(chunk.len());
        match stream.read(&mut chunk[..want]).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    Some(body)
}

/// Whether `name` is a hop-by-hop header, which a proxy must not pass on.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "transfer-encoding" | "te" | "trailer" | "upgrade"
    ) || name.starts_with("proxy-")
}

/// The header names a request's `Connection` header marks hop-by-hop.
pub(crate) fn connection_tokens(head: &Head) -> Vec<String> {
    head.header_values("connection")
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A response head to write: status line and headers. `Connection: close`
/// is always added: the proxy serves one request per connection.
#[derive(Debug, Clone)]
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

impl ResponseHead {
    /// A head with `status` and no headers yet.
    pub(crate) fn new(status: u16) -> ResponseHead {
        ResponseHead {
            status,
            headers: Vec::new(),
        }
    }

    /// Adds a header.
    pub(crate) fn with(mut self, name: &str, value: impl Into<Vec<u8>>) -> ResponseHead {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// The wire form, ending with the blank line.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let reason = reqwest::StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut out = format!("HTTP/1.1 {} {reason}\r\n", self.status).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"connection: close\r\n\r\n");
        out
    }
}

/// One chunk of a chunked body, framed.
pub(crate) fn chunk_frame(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// The end of a chunked body.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The body of an injected error answer when the rule gives none.
pub fn default_error_body(code: u16) -> String {
    json!({
        "error": {
            "message": format!("injected by rein-chaos proxy: HTTP {code}"),
            "type": "chaos_injected",
        }
    })
    .to_string()
}

/// A complete answer with `code`, `body` (or the default error body) and
/// an optional `Retry-After`.
pub(crate) fn error_response(code: u16, retry_after_s: Option<u64>, body: Option<&str>) -> Vec<u8> {
    let default;
    let body = match body {
        Some(body) => body,
        None => {
            default = default_error_body(code);
            default.as_str()
        }
    };
    // A custom body is labelled JSON only when it is JSON, so a client that
    // decodes by content type sees what a real service would send.
    let content_type = if serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut head = ResponseHead::new(code)
        .with("content-type", content_type)
        .with("content-length", body.len().to_string());
    if let Some(seconds) = retry_after_s {
        head = head.with("retry-after", seconds.to_string());
    }
    let mut out = head.encode();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A complete answer for a request the proxy itself refuses (bad framing,
/// too large): not an injection, so it says so.
pub(crate) fn rejection(code: u16, message: &str) -> Vec<u8> {
    let body = json!({
        "error": {
            "message": format!("rein-chaos proxy: {message}"),
            "type": "proxy_rejected",
        }
    })
    .to_string();
    let mut out = ResponseHead::new(code)
        .with("content-type", "application/json")
        .with("content-length", body.len().to_string())
        .encode();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Whether an I/O error means the peer is gone rather than a local fault.
pub(crate) fn is_disconnect(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::BrokenPipe
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::UnexpectedEof
            | ErrorKind::NotConnected
    )
}

/// Resolves when the client closes its side or the socket fails; bytes it
/// sends meanwhile are dropped.
///
/// NOTE: a client that half-closes after its request (shutdown of its write
/// side) looks gone too; reqwest, curl and rein do not do that.
pub(crate) async fn hangup(stream: &TcpStream) {
    let mut buf = [0u8; 1024];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Whether the client has already closed its side (or the socket failed),
/// without waiting; bytes it sent meanwhile are dropped.
///
/// # Why
///
/// While the proxy waits for the upstream it does not watch the client, so
/// that a forwarded call always runs to its end upstream. A first write to
/// a peer that has closed usually succeeds anyway, so this check is what
/// keeps such a request from being recorded as answered.
pub(crate) fn client_left(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match stream.try_read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn head_of(bytes: &[u8]) -> HeadRead {
        let mut reader = bytes;
        read_head(&mut reader).await
    }

    fn parsed(read: HeadRead) -> Head {
        match read {
            HeadRead::Head(head) => head,
            other => panic!("expected a head, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn read_head_parses_request_and_keeps_body_start() {
        let head = parsed(
            head_of(b"POST /tools/a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nab").await,
        );
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/tools/a?x=1");
        assert_eq!(head.header("content-length").as_deref(), Some("5"));
        assert_eq!(head.rest, b"ab");
        assert_eq!(
            framing(&head),
            Framing::Length {
                len: 5,
                declared: true
            }
        );
    }

    #[tokio::test]
    async fn read_head_on_garbage_is_malformed_and_on_eof_closed() {
        assert!(matches!(
            head_of(b"\x00\x01 nonsense\r\n\r\n").await,
            HeadRead::Malformed(_)
        ));
        assert!(matches!(
            head_of(b"GET / HTTP/1.1\r\n").await,
            HeadRead::Closed
        ));
    }

    #[tokio::test]
    async fn framing_rejects_chunked_and_disagreeing_lengths() {
        let chunked =
            parsed(head_of(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").await);
        assert!(matches!(framing(&chunked), Framing::Unsupported(_)));
        let two = parsed(
            head_of(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").await,
        );
        assert!(matches!(framing(&two), Framing::Malformed(_)));
        let signed = parsed(head_of(b"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n").await);
        assert!(matches!(framing(&signed), Framing::Malformed(_)));
        let same = parsed(head_of(b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n").await);
        assert_eq!(
            framing(&same),
            Framing::Length {
                len: 3,
                declared: true
            }
        );
    }

    #[test]
    fn error_response_has_default_json_body_and_retry_after() {
        let text = String::from_utf8(error_response(429, Some(7), None)).unwrap();
        assert!(text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(text.contains("retry-after: 7\r\n"));
        assert!(text.contains("content-type: application/json\r\n"));
        assert!(text.contains("connection: close\r\n"));
        assert!(text.ends_with(&default_error_body(429)));
    }

    #[test]
    fn chunk_frame_uses_hex_length() {
        assert_eq!(
            chunk_frame(&[b'x'; 26]),
            [b"1a\r\n".as_slice(), &[b'x'; 26], b"\r\n"].concat()
        );
    }

    #[test]
    fn hop_by_hop_headers_are_recognised() {
        for name in [
            "Connection",
            "keep-alive",
            "Transfer-Encoding",
            "TE",
            "Proxy-Authorization",
        ] {
            assert!(is_hop_by_hop(name), "{name}");
        }
        assert!(!is_hop_by_hop("content-type"));
    }
}
