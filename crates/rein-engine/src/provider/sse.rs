//! Server-sent events: the line parser, and the driver that reads a
//! provider's event stream under its [`StreamLimits`] and turns it into a
//! [`TurnStream`].
//!
//! # Rules the driver enforces for every provider
//!
//! | what happens | what the stream yields |
//! | --- | --- |
//! | no response headers or no event by the first-byte limit | `Err`, `timeout`, "first-byte limit" |
//! | no event for the idle limit once started | `Err`, `timeout`, "idle limit" |
//! | the allowance runs out, even while events flow | `Err`, `timeout`, "allowance" |
//! | the connection breaks before the terminator | `Err`, `transient` |
//! | an event that cannot be parsed | `Err`, `transient` (see below) |
//! | the terminator (`data: [DONE]`, `message_stop`) | `Done` at once, without reading further |
//! | a clean end of the body without the terminator, after the finish reason | `Done` at once |
//! | a clean end of the body before any finish reason | `Err`, `transient`: the answer is cut |
//!
//! Liveness is any complete SSE line, including `:` keep-alive comments
//! and Anthropic's `ping` events: a server that says it is still working is
//! not cut, but the allowance still caps it.
//!
//! # Why an unparseable event fails the turn
//!
//! Skipping it would be the lenient choice, but the event may have carried
//! a piece of the text or of a tool call's arguments: the assembled turn
//! would then look complete and be wrong (for arguments, valid JSON with a
//! field missing is worse than invalid JSON). So an unparseable event ends
//! the stream with a retryable `transient` failure, the same for every
//! provider. Events that parse but carry nothing rein reads (an unknown
//! event type, a thinking block) are skipped: that is forward
//! compatibility, not corruption.
//!
//! # Tokens of a failed stream
//!
//! Once the provider accepted the request (a 2xx status) and sent at least
//! one event, a failure carries [`Failure::tokens_spent`]: the usage the
//! provider reported so far
//! (Anthropic reports input tokens in `message_start`), else an estimate of
//! one token per [`BYTES_PER_TOKEN_ESTIMATE`](super::BYTES_PER_TOKEN_ESTIMATE)
//! bytes of the request body and of the output received; the human message
//! says when the count is an estimate. A failure before the status
//! (refused, no headers in time, an error status) charges nothing: there
//! is no sign the provider accepted the work; nor does one before the
//! first event (a 200 and then silence): tokens are charged only from what
//! the provider reported or what was received.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream;
use rein_core::failure::{TransportError, TransportPhase};
use rein_core::{Clock, Failure, Instant};

use super::http::{http_failure, malformed, retry_after, transport_failure};
use super::stream::{Assembly, Delta, StreamEvent, StreamLimits, TurnStream, ready_turn};
use super::{FinishReason, ModelResponse};
use crate::Timer;

/// The longest SSE line accepted; a longer one is a malformed stream, so a
/// broken server cannot grow the buffer without bound.
pub(super) const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SseEvent {
    /// The `event:` field, if any.
    pub(super) event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub(super) data: String,
}

/// An incremental parser of the `text/event-stream` format: bytes in,
/// events out. Lines end in `\n`, `\r\n` or `\r`; `id:` and `retry:` are
/// ignored (a model stream is never resumed).
#[derive(Debug, Default)]
pub(super) struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds `bytes`, appending every completed event to `out`, and returns
    /// how many lines were completed (the driver's liveness signal).
    ///
    /// # Errors
    ///
    /// A message when a line grows past [`MAX_LINE_BYTES`].
    pub(super) fn feed(
        &mut self,
        bytes: &[u8],
        out: &mut VecDeque<SseEvent>,
    ) -> Result<usize, String> {
        let mut lines = 0;
        for &b in bytes {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\n' | b'\r' => {
                    self.end_line(out);
                    lines += 1;
                    self.after_cr = b == b'\r';
                }
                _ => {
                    if self.line.len() >= MAX_LINE_BYTES {
                        return Err(format!(
                            "a stream line is longer than {MAX_LINE_BYTES} bytes"
                        ));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(lines)
    }

    /// The body ended: a last event not closed by a blank line is
    /// dispatched anyway (some servers omit the final blank line).
    pub(super) fn finish(&mut self, out: &mut VecDeque<SseEvent>) {
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.dispatch(out);
    }

    fn end_line(&mut self, out: &mut VecDeque<SseEvent>) {
        let raw = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&raw);
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut VecDeque<SseEvent>) {
        if self.has_data {
            out.push_back(SseEvent {
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            });
        }
        self.event = None;
        self.has_data = false;
    }
}

/// What one event means for the turn, in provider-neutral terms.
#[derive(Debug)]
pub(super) enum Update {
    /// Content to forward and assemble.
    Delta(Delta),
    /// Why the model stopped.
    Finish(FinishReason),
    /// The stop sequence that stopped it, when the provider names it.
    StopSequence(String),
    /// Token counts the provider reported (cumulative; `None` keeps the
    /// previous value).
    Usage {
        /// Input tokens.
        input: Option<u64>,
        /// Output tokens.
        output: Option<u64>,
    },
    /// The terminator: the turn is complete.
    End,
}

/// A provider's reading of its own event stream.
pub(super) trait Decoder: Send + 'static {
    /// How the terminator is named in failure messages.
    const TERMINATOR: &'static str;

    /// Reads one event into `updates`.
    ///
    /// # Errors
    ///
    /// A failure when the event is malformed (see the module docs: the
    /// turn fails) or carries an error.
    fn decode(&mut self, event: &SseEvent, updates: &mut Vec<Update>) -> Result<(), Failure>;

    /// Reads a whole non-streamed answer, for a server that ignored
    /// `"stream": true` and answered with JSON.
    ///
    /// # Errors
    ///
    /// A failure when the body is not an answer.
    fn whole(&self, body: &str) -> Result<ModelResponse, Failure>;
}

/// Which limit cut a stream.
#[derive(Debug, Clone, Copy)]
enum Limit {
    FirstByte(Duration),
    Idle(Duration),
    Allowance(Duration),
}

impl Limit {
    fn describe(self, events: usize) -> String {
        match self {
            Limit::FirstByte(d) => format!("no stream event within the first-byte limit of {d:?}"),
            Limit::Idle(d) => {
                format!(
                    "the stream went idle for the idle limit of {d:?} after {}",
                    rein_core::plural::count(events, "event")
                )
            }
            Limit::Allowance(d) => format!(
                "the call's allowance of {d:?} ran out while streaming, after {}",
                rein_core::plural::count(events, "event")
            ),
        }
    }
}

/// What a provider hands the driver to open a stream.
pub(super) struct Opening<'a, D> {
    /// The provider's name: the failures' target.
    pub(super) name: &'a str,
    /// The request, ready to send (URL, headers, body).
    pub(super) request: reqwest::RequestBuilder,
    /// The size of the request body, for the token estimate.
    pub(super) request_bytes: usize,
    /// The limits, with the allowance already capped by the provider's
    /// timeout.
    pub(super) limits: StreamLimits,
    /// How to read the events.
    pub(super) decoder: D,
    /// Times the limits; the provider's clock.
    pub(super) clock: Arc<dyn Timer>,
}

/// Sends the request and returns its turn stream once the headers say the
/// provider accepted it.
///
/// # Errors
///
/// A transport failure, a `timeout` at the first-byte limit when no headers
/// came, or the classified error answer; none of these charge tokens.
pub(super) async fn open<D: Decoder>(opening: Opening<'_, D>) -> Result<TurnStream, Failure> {
    let Opening {
        name,
        request,
        request_bytes,
        limits,
        decoder,
        clock,
    } = opening;
    let started = clock.now();
    let elapsed = || clock.now().saturating_duration_since(started);
    let deadline = started + limits.allowance;
    let (first_by, limit) = earliest(
        started + limits.first_byte,
        Limit::FirstByte(limits.first_byte),
        deadline,
        limits.allowance,
    );
    // Backstop only: the driver's own timers end the call first.
    let request = request.timeout(limits.allowance);
    let response = match clock.timeout_at(first_by, request.send()).await {
        Err(_) => {
            return Err(stalled(name, limit, 0).with_human_message(format!(
                "{name}: {} (no response headers)",
                limit.describe(0)
            )));
        }
        Ok(Err(e)) => {
            return Err(transport_failure(name, &e, elapsed(), limits.allowance));
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let retry_after = retry_after(&response);
        let body = match clock.timeout_at(deadline, response.text()).await {
            Ok(Ok(text)) => text,
            Ok(Err(_)) | Err(_) => String::new(),
        };
        return Err(http_failure(
            name,
            status,
            retry_after.as_deref(),
            &body,
            clock.system_now(),
        ));
    }
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        // A server that does not stream: the whole answer is the first
        // event, under the same limit.
        let text = match clock.timeout_at(first_by, response.text()).await {
            Err(_) => return Err(stalled(name, limit, 0)),
            Ok(Err(e)) => {
                return Err(transport_failure(name, &e, elapsed(), limits.allowance));
            }
            Ok(Ok(text)) => text,
        };
        return Ok(ready_turn(decoder.whole(&text)?));
    }
    let wire = Wire {
        name: name.to_owned(),
        response: Some(response),
        decoder,
        parser: SseParser::default(),
        assembly: Assembly::default(),
        events: VecDeque::new(),
        out: VecDeque::new(),
        limits,
        started,
        deadline,
        last_line: None,
        event_count: 0,
        request_bytes,
        ended: false,
        finished: false,
        clock,
    };
    Ok(Box::pin(stream::unfold(wire, |mut wire| async move {
        let item = wire.next().await?;
        Some((item, wire))
    })))
}

/// The earlier of a limit's instant and the deadline, and which it is.
fn earliest(at: Instant, limit: Limit, deadline: Instant, allowance: Duration) -> (Instant, Limit) {
    if deadline <= at {
        (deadline, Limit::Allowance(allowance))
    } else {
        (at, limit)
    }
}

fn stalled(name: &str, limit: Limit, events: usize) -> Failure {
    Failure::from_transport(name, TransportError::Timeout, TransportPhase::AfterSend)
        .with_human_message(format!("{name}: {}", limit.describe(events)))
}

/// One open stream being read.
struct Wire<D> {
    name: String,
    /// `None` once the stream is finished: the connection is released at
    /// once, not when the consumer drops the stream.
    response: Option<reqwest::Response>,
    decoder: D,
    parser: SseParser,
    assembly: Assembly,
    /// Parsed events not yet decoded.
    events: VecDeque<SseEvent>,
    /// Items ready for the consumer.
    out: VecDeque<Result<StreamEvent, Failure>>,
    limits: StreamLimits,
    started: Instant,
    deadline: Instant,
    last_line: Option<Instant>,
    event_count: usize,
    request_bytes: usize,
    /// The body ended cleanly.
    ended: bool,
    /// The terminal item was queued.
    finished: bool,
    clock: Arc<dyn Timer>,
}

impl<D: Decoder> Wire<D> {
    async fn next(&mut self) -> Option<Result<StreamEvent, Failure>> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            if let Some(event) = self.events.pop_front() {
                self.handle(&event);
                continue;
            }
            if self.ended {
                self.end_without_terminator();
                continue;
            }
            self.read().await;
        }
    }

    /// Reads the next chunk of the body, or fails at the limit that ran out.
    async fn read(&mut self) {
        let (at, limit) = match self.last_line {
            None => (
                self.started + self.limits.first_byte,
                Limit::FirstByte(self.limits.first_byte),
            ),
            Some(last) => (last + self.limits.idle, Limit::Idle(self.limits.idle)),
        };
        let (until, limit) = earliest(at, limit, self.deadline, self.limits.allowance);
        let Some(response) = self.response.as_mut() else {
            self.ended = true;
            return;
        };
        match self.clock.timeout_at(until, response.chunk()).await {
            Err(_) => {
                let failure = stalled(&self.name, limit, self.event_count);
                self.fail(failure);
            }
            Ok(Err(e)) => {
                let failure = if e.is_timeout() {
                    stalled(
                        &self.name,
                        Limit::Allowance(self.limits.allowance),
                        self.event_count,
                    )
                } else {
                    Failure::from_transport(
                        &self.name,
                        TransportError::Reset,
                        TransportPhase::AfterSend,
                    )
                    .with_human_message(format!(
                        "{}: the stream broke after {}, without {}: {e}",
                        self.name,
                        rein_core::plural::count(self.event_count, "event"),
                        D::TERMINATOR
                    ))
                };
                self.fail(failure);
            }
            Ok(Ok(None)) => {
                self.parser.finish(&mut self.events);
                self.ended = true;
            }
            Ok(Ok(Some(bytes))) => match self.parser.feed(&bytes, &mut self.events) {
                Ok(0) => {}
                Ok(_) => self.last_line = Some(self.clock.now()),
                Err(why) => {
                    let failure = malformed(&self.name, &why, "");
                    self.fail(failure);
                }
            },
        }
    }

    fn handle(&mut self, event: &SseEvent) {
        self.event_count += 1;
        let mut updates = Vec::new();
        if let Err(failure) = self.decoder.decode(event, &mut updates) {
            self.fail(failure);
            return;
        }
        for update in updates {
            match update {
                Update::Delta(delta) => {
                    if !delta.is_empty() {
                        self.assembly.apply(&delta);
                        self.out.push_back(Ok(StreamEvent::Delta(delta)));
                    }
                }
                Update::Finish(finish) => self.assembly.finish = Some(finish),
                Update::StopSequence(sequence) => self.assembly.stop_sequence = Some(sequence),
                Update::Usage { input, output } => {
                    if let Some(tokens) = input
                        && self.assembly.input_tokens.is_none()
                        && !self.assembly.produced()
                    {
                        self.out.push_back(Ok(StreamEvent::PromptTokens(tokens)));
                    }
                    if input.is_some() {
                        self.assembly.input_tokens = input;
                    }
                    if output.is_some() {
                        self.assembly.output_tokens = output;
                    }
                }
                Update::End => {
                    let finish = self.assembly.finish.unwrap_or(FinishReason::Other);
                    self.complete(finish);
                    return;
                }
            }
        }
    }

    /// The body ended cleanly, without the terminator: complete at once if
    /// the provider already said why it stopped, else the answer is cut.
    fn end_without_terminator(&mut self) {
        match self.assembly.finish {
            Some(finish) => {
                tracing::debug!(
                    provider = %self.name,
                    terminator = D::TERMINATOR,
                    "stream ended without its terminator after its finish reason; completing"
                );
                self.complete(finish);
            }
            None => {
                let failure = Failure::from_transport(
                    &self.name,
                    TransportError::Reset,
                    TransportPhase::AfterSend,
                )
                .with_human_message(format!(
                    "{}: the stream ended after {} without {} and without a finish reason",
                    self.name,
                    rein_core::plural::count(self.event_count, "event"),
                    D::TERMINATOR
                ));
                self.fail(failure);
            }
        }
    }

    fn complete(&mut self, finish: FinishReason) {
        let spent = self.assembly.spent(self.request_bytes, false);
        if spent.estimated {
            tracing::debug!(
                provider = %self.name,
                input = spent.usage.input,
                output = spent.usage.output,
                "stream reported no usage; charging an estimate"
            );
        }
        match self.assembly.finish(finish, spent.usage) {
            Ok(response) => {
                self.out.push_back(Ok(StreamEvent::Done(response)));
                self.finished = true;
                self.response = None;
            }
            Err(why) => {
                let failure = malformed(&self.name, &why, "");
                self.fail(failure);
            }
        }
    }

    /// Ends the stream with `failure`, charged and described.
    fn fail(&mut self, failure: Failure) {
        // Nothing received and nothing reported (a first-byte timeout after
        // the 200): the provider produced nothing, and nothing is charged
        // (issue 35, item 5).
        let spent = if self.event_count == 0 {
            super::stream::Spent::NONE
        } else {
            self.assembly.spent(self.request_bytes, true)
        };
        let total = spent.usage.total();
        let human = format!(
            "{} — {}; {} charged{}",
            failure.human_message(),
            self.assembly.describe(),
            rein_core::plural::count(total, "token"),
            if spent.estimated {
                " (estimated at one token per 4 bytes of request and output)"
            } else {
                ""
            }
        );
        tracing::warn!(
            provider = %self.name,
            category = %failure.category(),
            events = self.event_count,
            "model stream failed: {}",
            rein_core::redact::truncated(&human, 400)
        );
        self.finished = true;
        self.response = None;
        self.out.push_back(Err(failure
            .with_tokens_spent(total)
            .with_human_message(human)));
    }
}

/// The failure for an event a decoder cannot read: `transient`, the same
/// for every provider (see the module docs).
pub(super) fn unparseable(name: &str, event: &SseEvent, why: &str) -> Failure {
    malformed(
        name,
        &format!("unparseable stream event: {why}"),
        &event.data,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&str]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out = VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk.as_bytes(), &mut out).unwrap();
        }
        parser.finish(&mut out);
        out.into()
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn parser_reads_events_split_anywhere_with_any_line_ending() {
        let text = "event: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\n: keep-alive\n\ndata:[DONE]\r\rdata: tail";
        for split in 0..text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(
                parse(&[a, b]),
                vec![
                    ev(Some("a"), "{\"x\":\n1}"),
                    ev(None, "[DONE]"),
                    ev(None, "tail")
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn parser_counts_lines_as_liveness_and_ignores_blank_dispatches() {
        let mut parser = SseParser::default();
        let mut out = VecDeque::new();
        assert_eq!(parser.feed(b": ping\n\n", &mut out).unwrap(), 2);
        assert!(out.is_empty());
        assert_eq!(parser.feed(b"data: x", &mut out).unwrap(), 0);
    }

    #[test]
    fn parser_refuses_an_endless_line() {
        let mut parser = SseParser::default();
        let mut out = VecDeque::new();
        let big = vec![b'a'; MAX_LINE_BYTES + 1];
        assert!(parser.feed(&big, &mut out).is_err());
    }

    #[test]
    fn parser_survives_invalid_utf8() {
        let mut parser = SseParser::default();
        let mut out = VecDeque::new();
        parser.feed(b"data: \xff\xfe\n\n", &mut out).unwrap();
        assert_eq!(out.len(), 1);
    }
}
