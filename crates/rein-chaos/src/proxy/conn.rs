//! One client connection: read the request, pick the fault, act, record.
//!
//! # Ordering
//!
//! A request is counted in flight from the moment its head is parsed. It is
//! counted out, and its trace record appended, *just before* the proxy
//! writes the bytes that let the client finish (the end of the body, the
//! reset, the close): so a client holding its answer, or its error, always
//! finds its record in the trace and never finds its request still in
//! flight. When that last write fails the record is amended to
//! [`ClientSaw::ClientGone`].

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout};
use tracing::{debug, warn};

use super::constants::{
    ATTEMPT_HEADER, CLOSE_DRAIN_TIMEOUT, IDEMPOTENCY_KEY_HEADER, INTENT_ID_HEADER,
    MAX_BUFFERED_RESPONSE_BYTES, REQUEST_READ_TIMEOUT, RUN_ID_HEADER, TRACE_BODY_CAP,
};
use super::rule::{Injection, RequestFacts};
use super::trace::{ClientSaw, InFlightGuard, TraceRecord};
use super::wire::{
    self, Framing, Head, HeadRead, LAST_CHUNK, ResponseHead, chunk_frame, client_left,
    connection_tokens, error_response, hangup, is_hop_by_hop, rejection,
};
use super::{Shared, tool_of, unix_ms};

/// Serves one connection: one request, one answer (or fault), then close.
pub(crate) async fn serve(shared: Arc<Shared>, mut stream: TcpStream) {
    if let Err(err) = stream.set_nodelay(true) {
        debug!(%err, "cannot set TCP_NODELAY on a client socket");
    }
    let head = match timeout(REQUEST_READ_TIMEOUT, wire::read_head(&mut stream)).await {
        Err(_) => {
            debug!("client sent no complete request head in time; closing");
            return;
        }
        Ok(HeadRead::Closed) => return,
        Ok(HeadRead::Malformed(reason)) => {
            warn!(%reason, "malformed request; answering 400");
            let _ = stream.write_all(&rejection(400, &reason)).await;
            close(&mut stream).await;
            return;
        }
        Ok(HeadRead::TooLarge) => {
            warn!("request head too large; answering 431");
            let _ = stream
                .write_all(&rejection(431, "request head is too large"))
                .await;
            close(&mut stream).await;
            return;
        }
        Ok(HeadRead::Head(head)) => head,
    };
    let exchange = Exchange::begin(shared, &head);
    exchange.run(stream, head).await;
}

/// What happened to a request so far.
struct Exchange {
    shared: Arc<Shared>,
    record: TraceRecord,
    guard: Option<InFlightGuard>,
}

/// Whether a wait ended by itself or because the client left.
enum Waited {
    Elapsed,
    Hangup,
}

impl Exchange {
    fn begin(shared: Arc<Shared>, head: &Head) -> Exchange {
        let seq = shared.next_seq();
        let tool = tool_of(&head.target);
        let guard = Some(shared.in_flight.enter(tool.as_deref()));
        let record = TraceRecord {
            seq,
            at_ms: unix_ms(),
            method: head.method.clone(),
            path: head.target.clone(),
            tool,
            idempotency_key: head.header(IDEMPOTENCY_KEY_HEADER),
            run_id: head.header(RUN_ID_HEADER),
            intent_id: head.header(INTENT_ID_HEADER),
            attempt: head.header(ATTEMPT_HEADER).and_then(|a| a.parse().ok()),
            request_body: String::new(),
            injected: None,
            forwarded: false,
            upstream_status: None,
            upstream_error: None,
            // Replaced by `finish`.
            client_saw: ClientSaw::ClientGone,
            finished_ms: 0,
        };
        Exchange {
            shared,
            record,
            guard,
        }
    }

    /// Counts the request out and appends its record; returns its seq for
    /// [`amend_gone`](Self::amend_gone).
    fn finish(&mut self, saw: ClientSaw) -> u64 {
        self.guard = None;
        self.record.client_saw = saw;
        self.record.finished_ms = unix_ms();
        debug!(
            seq = self.record.seq,
            path = %self.record.path,
            injected = self.record.injected.as_ref().map(Injection::name),
            client_saw = ?self.record.client_saw,
            "request done"
        );
        self.shared.push_trace(self.record.clone());
        self.record.seq
    }

    /// Marks a finished request's client as gone after a failed last write.
    fn amend_gone(&self, seq: u64) {
        self.shared.amend_trace(seq, ClientSaw::ClientGone);
    }

    async fn run(mut self, mut stream: TcpStream, mut head: Head) {
        let (len, declared) = match wire::framing(&head) {
            Framing::Length { len, declared } => (len, declared),
            Framing::Unsupported(reason) => {
                self.reject(stream, 501, &reason).await;
                return;
            }
            Framing::Malformed(reason) => {
                self.reject(stream, 400, &reason).await;
                return;
            }
            Framing::TooLarge(len) => {
                let reason = format!("request body of {len} bytes is too large");
                self.reject(stream, 413, &reason).await;
                return;
            }
        };
        if wire::expects_continue(&head)
            && stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            self.finish(ClientSaw::ClientGone);
            return;
        }
        let rest = std::mem::take(&mut head.rest);
        let body = match timeout(
            REQUEST_READ_TIMEOUT,
            wire::read_body(&mut stream, rest, len),
        )
        .await
        {
            Ok(Some(body)) => body,
            Ok(None) | Err(_) => {
                debug!(seq = self.record.seq, "client left before its body was in");
                self.finish(ClientSaw::ClientGone);
                return;
            }
        };
        let shown = body.get(..TRACE_BODY_CAP).unwrap_or(&body);
        self.record.request_body = String::from_utf8_lossy(shown).into_owned();

        let request = match self.upstream_request(&head, body, declared) {
            Ok(request) => request,
            Err(reason) => {
                self.reject(stream, 400, &reason).await;
                return;
            }
        };
        let injection = {
            let facts = RequestFacts {
                method: &self.record.method,
                target: &self.record.path,
                tool: self.record.tool.as_deref(),
                attempt: self.record.attempt,
            };
            self.shared.select(&facts)
        };
        self.record.injected = injection.clone();
        self.act(stream, request, injection).await;
    }

    /// Answers a request the proxy cannot serve (not an injection).
    async fn reject(&mut self, mut stream: TcpStream, code: u16, reason: &str) {
        warn!(seq = self.record.seq, code, %reason, "rejecting request");
        let seq = self.finish(ClientSaw::Response { status: code });
        if stream.write_all(&rejection(code, reason)).await.is_err() {
            self.amend_gone(seq);
        }
        close(&mut stream).await;
    }

    /// The request to send upstream: same method, target, end-to-end
    /// headers and body.
    fn upstream_request(
        &self,
        head: &Head,
        body: Vec<u8>,
        declared: bool,
    ) -> Result<reqwest::Request, String> {
        if !head.target.starts_with('/') {
            return Err(format!(
                "request target must be a path starting with '/', but {:?} is not",
                head.target
            ));
        }
        let method = reqwest::Method::from_bytes(head.method.as_bytes())
            .map_err(|err| format!("method {:?}: {err}", head.method))?;
        let url = format!("{}{}", self.shared.upstream, head.target);
        let url = reqwest::Url::parse(&url).map_err(|err| format!("target {url:?}: {err}"))?;
        let tokens = connection_tokens(head);
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &head.headers {
            let lower = name.to_ascii_lowercase();
            // Host is set by the client from the upstream URL; the length
            // from the body; `Expect` was answered here.
            if is_hop_by_hop(&lower)
                || matches!(lower.as_str(), "host" | "content-length" | "expect")
                || tokens.contains(&lower)
            {
                continue;
            }
            let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(lower.as_bytes()),
                reqwest::header::HeaderValue::from_bytes(value),
            ) else {
                debug!(header = %name, "dropping a header that cannot be forwarded");
                continue;
            };
            headers.append(name, value);
        }
        let mut builder = self.shared.client.request(method, url).headers(headers);
        if declared || !body.is_empty() {
            builder = builder.body(body);
        }
        builder
            .build()
            .map_err(|err| format!("cannot build the upstream request: {err}"))
    }

    async fn act(
        mut self,
        mut stream: TcpStream,
        request: reqwest::Request,
        injection: Option<Injection>,
    ) {
        match injection {
            None => {
                if let Some(resp) = self.forward(&mut stream, request).await {
                    self.relay(stream, resp, None).await;
                }
            }
            Some(Injection::Delay { ms }) => {
                if let Waited::Hangup = wait_or_hangup(&stream, ms).await {
                    self.finish(ClientSaw::ClientGone);
                    return;
                }
                if let Some(resp) = self.forward(&mut stream, request).await {
                    self.relay(stream, resp, None).await;
                }
            }
            Some(Injection::LateDelivery { ms }) => {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                if let Some(resp) = self.forward(&mut stream, request).await {
                    self.relay(stream, resp, None).await;
                }
            }
            Some(Injection::StallFirstByte { ms }) => {
                if let Some(resp) = self.forward(&mut stream, request).await {
                    self.relay(stream, resp, Some(ms)).await;
                }
            }
            Some(Injection::IdleStream { ms }) => {
                if let Some(resp) = self.forward(&mut stream, request).await {
                    self.idle(stream, resp, ms).await;
                }
            }
            Some(Injection::ResetBeforeForward) => {
                self.finish(ClientSaw::Reset);
                reset(stream);
            }
            Some(Injection::ResetAfterForward) => {
                if let Some(resp) = self.forward(&mut stream, request).await {
                    // Let the upstream finish its answer before the client's
                    // connection dies; the answer itself is lost.
                    let _ = self.read_whole(resp).await;
                    self.finish(ClientSaw::Reset);
                    reset(stream);
                }
            }
            Some(Injection::TruncateBody { keep }) => {
                if let Some(resp) = self.forward(&mut stream, request).await {
                    self.truncate(stream, resp, keep).await;
                }
            }
            Some(Injection::Status {
                code,
                retry_after_s,
                body,
            }) => {
                self.answer(stream, code, retry_after_s, body.as_deref())
                    .await;
            }
            Some(Injection::ExecutedThenStatus { code, body }) => {
                if let Some(resp) = self.forward(&mut stream, request).await {
                    let _ = self.read_whole(resp).await;
                    self.answer(stream, code, None, body.as_deref()).await;
                }
            }
        }
    }

    /// Sends the request upstream. When the upstream cannot be reached,
    /// answers 502 itself and returns `None`.
    async fn forward(
        &mut self,
        stream: &mut TcpStream,
        request: reqwest::Request,
    ) -> Option<reqwest::Response> {
        match self.shared.client.execute(request).await {
            Ok(resp) => {
                self.record.forwarded = true;
                self.record.upstream_status = Some(resp.status().as_u16());
                Some(resp)
            }
            Err(err) => {
                // A connect failure never reached the upstream; any other
                // failure may have (the request was written, the answer lost).
                self.record.forwarded = !err.is_connect();
                let reason = error_chain(&err);
                warn!(seq = self.record.seq, %reason, "upstream failed; answering 502");
                self.record.upstream_error = Some(reason);
                let seq = self.finish(ClientSaw::BadGateway);
                if stream
                    .write_all(&error_response(502, None, None))
                    .await
                    .is_err()
                {
                    self.amend_gone(seq);
                }
                close(stream).await;
                None
            }
        }
    }

    /// Answers `code` without the upstream's answer.
    async fn answer(
        &mut self,
        mut stream: TcpStream,
        code: u16,
        retry_after_s: Option<u64>,
        body: Option<&str>,
    ) {
        if client_left(&stream) {
            self.finish(ClientSaw::ClientGone);
            return;
        }
        let bytes = error_response(code, retry_after_s, body);
        let seq = self.finish(ClientSaw::Response { status: code });
        if stream.write_all(&bytes).await.is_err() {
            self.amend_gone(seq);
        }
        close(&mut stream).await;
    }

    /// Reads the upstream body whole, up to
    /// [`MAX_BUFFERED_RESPONSE_BYTES`]; a failure is recorded.
    async fn read_whole(&mut self, mut resp: reqwest::Response) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    if body.len() + bytes.len() > MAX_BUFFERED_RESPONSE_BYTES {
                        self.record.upstream_error = Some(format!(
                            "upstream body exceeds {MAX_BUFFERED_RESPONSE_BYTES} bytes"
                        ));
                        return None;
                    }
                    body.extend_from_slice(&bytes);
                }
                Ok(None) => return Some(body),
                Err(err) => {
                    self.record.upstream_error = Some(error_chain(&err));
                    return None;
                }
            }
        }
    }

    /// Relays the upstream answer, after `stall_ms` when set: with its
    /// length when it has one, else chunk by chunk as it arrives.
    async fn relay(
        mut self,
        mut stream: TcpStream,
        mut resp: reqwest::Response,
        stall_ms: Option<u64>,
    ) {
        let status = resp.status().as_u16();
        if let Some(ms) = stall_ms {
            if let Waited::Hangup = wait_or_hangup(&stream, ms).await {
                self.finish(ClientSaw::ClientGone);
                return;
            }
        }
        if client_left(&stream) {
            self.finish(ClientSaw::ClientGone);
            return;
        }
        let mut head = response_head(&resp);
        let length = content_length(&resp);
        let bodiless =
            self.record.method.eq_ignore_ascii_case("HEAD") || status == 204 || status == 304;
        if bodiless {
            if let Some(len) = length {
                head = head.with("content-length", len.to_string());
            }
            let seq = self.finish(ClientSaw::Response { status });
            if stream.write_all(&head.encode()).await.is_err() {
                self.amend_gone(seq);
            }
            close(&mut stream).await;
            return;
        }
        match length {
            Some(len) => {
                head = head.with("content-length", len.to_string());
                if len == 0 {
                    let seq = self.finish(ClientSaw::Response { status });
                    if stream.write_all(&head.encode()).await.is_err() {
                        self.amend_gone(seq);
                    }
                    close(&mut stream).await;
                    return;
                }
                // The head goes out with the first body bytes: one write
                // for the usual small answer.
                self.relay_sized(stream, resp, status, len, head.encode())
                    .await;
            }
            None => {
                head = head.with("transfer-encoding", "chunked");
                if stream.write_all(&head.encode()).await.is_err() {
                    self.finish(ClientSaw::ClientGone);
                    return;
                }
                self.relay_chunked(stream, &mut resp, status).await;
            }
        }
    }

    /// Relays a body of `len` bytes (`len > 0`), writing `head` with its
    /// first bytes.
    async fn relay_sized(
        mut self,
        mut stream: TcpStream,
        mut resp: reqwest::Response,
        status: u16,
        len: usize,
        head: Vec<u8>,
    ) {
        let mut pending = head;
        let mut sent = 0usize;
        loop {
            let next = tokio::select! {
                // A client that left wins over a ready chunk.
                biased;
                () = hangup(&stream) => {
                    self.finish(ClientSaw::ClientGone);
                    return;
                }
                next = resp.chunk() => next,
            };
            match next {
                Ok(Some(bytes)) => {
                    let take = bytes.len().min(len - sent);
                    pending.extend_from_slice(bytes.get(..take).unwrap_or_default());
                    let piece = std::mem::take(&mut pending);
                    if sent + take == len {
                        let seq = self.finish(ClientSaw::Response { status });
                        if stream.write_all(&piece).await.is_err() {
                            self.amend_gone(seq);
                        }
                        close(&mut stream).await;
                        return;
                    }
                    if stream.write_all(&piece).await.is_err() {
                        self.finish(ClientSaw::ClientGone);
                        return;
                    }
                    sent += take;
                }
                Ok(None) => {
                    self.record.upstream_error =
                        Some(format!("upstream body ended after {sent} of {len} bytes"));
                    self.cut_short(stream, status, sent, pending).await;
                    return;
                }
                Err(err) => {
                    self.record.upstream_error = Some(error_chain(&err));
                    self.cut_short(stream, status, sent, pending).await;
                    return;
                }
            }
        }
    }

    /// Ends a sized answer whose upstream body broke off after `sent`
    /// bytes: the head still unwritten (`pending`) goes out, then the close.
    async fn cut_short(
        mut self,
        mut stream: TcpStream,
        status: u16,
        sent: usize,
        pending: Vec<u8>,
    ) {
        let seq = self.finish(ClientSaw::Truncated {
            status,
            bytes: sent,
        });
        if !pending.is_empty() && stream.write_all(&pending).await.is_err() {
            self.amend_gone(seq);
        }
        close(&mut stream).await;
    }

    /// Relays a body of unknown length as chunks, each written as soon as
    /// it arrives (so server-sent events stream through), after its head
    /// was written.
    async fn relay_chunked(
        mut self,
        mut stream: TcpStream,
        resp: &mut reqwest::Response,
        status: u16,
    ) {
        let mut sent = 0usize;
        loop {
            let next = tokio::select! {
                // A client that left wins over a ready chunk.
                biased;
                () = hangup(&stream) => {
                    self.finish(ClientSaw::ClientGone);
                    return;
                }
                next = resp.chunk() => next,
            };
            match next {
                Ok(Some(bytes)) if bytes.is_empty() => {}
                Ok(Some(bytes)) => {
                    if stream.write_all(&chunk_frame(&bytes)).await.is_err() {
                        self.finish(ClientSaw::ClientGone);
                        return;
                    }
                    sent += bytes.len();
                }
                Ok(None) => {
                    let seq = self.finish(ClientSaw::Response { status });
                    if stream.write_all(LAST_CHUNK).await.is_err() {
                        self.amend_gone(seq);
                    }
                    close(&mut stream).await;
                    return;
                }
                Err(err) => {
                    self.record.upstream_error = Some(error_chain(&err));
                    self.finish(ClientSaw::Truncated {
                        status,
                        bytes: sent,
                    });
                    close(&mut stream).await;
                    return;
                }
            }
        }
    }

    /// Sends the head of a chunked answer, then nothing for `ms` or until
    /// the client leaves, then closes without the end of the body.
    async fn idle(mut self, mut stream: TcpStream, resp: reqwest::Response, ms: u64) {
        let status = resp.status().as_u16();
        let head = response_head(&resp).with("transfer-encoding", "chunked");
        // The upstream's body is never relayed.
        drop(resp);
        if client_left(&stream) || stream.write_all(&head.encode()).await.is_err() {
            self.finish(ClientSaw::ClientGone);
            return;
        }
        let _ = wait_or_hangup(&stream, ms).await;
        self.finish(ClientSaw::Idle { status });
        close(&mut stream).await;
    }

    /// Sends the status and the real length, then fewer body bytes than
    /// that, then closes.
    async fn truncate(mut self, mut stream: TcpStream, resp: reqwest::Response, keep: usize) {
        let status = resp.status().as_u16();
        let head = response_head(&resp);
        let Some(body) = self.read_whole(resp).await else {
            let seq = self.finish(ClientSaw::BadGateway);
            if stream
                .write_all(&error_response(502, None, None))
                .await
                .is_err()
            {
                self.amend_gone(seq);
            }
            close(&mut stream).await;
            return;
        };
        if client_left(&stream) {
            self.finish(ClientSaw::ClientGone);
            return;
        }
        let len = body.len();
        let mut bytes = head.with("content-length", len.to_string()).encode();
        let saw = if len == 0 {
            // Nothing to cut: the empty body is relayed whole.
            ClientSaw::Response { status }
        } else {
            let kept = keep.min(len - 1);
            bytes.extend_from_slice(body.get(..kept).unwrap_or_default());
            ClientSaw::Truncated {
                status,
                bytes: kept,
            }
        };
        let seq = self.finish(saw);
        if stream.write_all(&bytes).await.is_err() {
            self.amend_gone(seq);
        }
        close(&mut stream).await;
    }
}

/// The upstream's status and end-to-end headers, without its framing.
fn response_head(resp: &reqwest::Response) -> ResponseHead {
    let mut head = ResponseHead::new(resp.status().as_u16());
    for (name, value) in resp.headers() {
        let name = name.as_str();
        if is_hop_by_hop(name) || name == "content-length" {
            continue;
        }
        head.headers
            .push((name.to_owned(), value.as_bytes().to_vec()));
    }
    head
}

/// The upstream's `Content-Length`, when it sent a valid one.
fn content_length(resp: &reqwest::Response) -> Option<usize> {
    resp.headers()
        .get(reqwest::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Waits `ms`, or less when the client leaves first.
async fn wait_or_hangup(stream: &TcpStream, ms: u64) -> Waited {
    tokio::select! {
        // A client that left wins over an elapsed wait.
        biased;
        () = hangup(stream) => Waited::Hangup,
        () = sleep(Duration::from_millis(ms)) => Waited::Elapsed,
    }
}

/// Resets the connection: with a zero linger, the close sends RST instead
/// of FIN and discards anything unsent.
fn reset(stream: TcpStream) {
    if let Err(err) = stream.set_zero_linger() {
        warn!(%err, "cannot set SO_LINGER 0; the close will be a FIN, not a reset");
    }
    drop(stream);
}

/// Closes gracefully: FIN, then read until the client closes too (bounded),
/// so bytes it sent that were never read do not turn the close into a reset
/// that could destroy the answer in flight.
async fn close(stream: &mut TcpStream) {
    if let Err(err) = stream.shutdown().await {
        if !wire::is_disconnect(&err) {
            debug!(%err, "shutdown of a client socket failed");
        }
        return;
    }
    let _ = timeout(CLOSE_DRAIN_TIMEOUT, hangup(stream)).await;
}

/// An error with its sources, since reqwest's own message hides the cause
/// ("error sending request").
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
