//! Server-sent event bodies for streamed answers, with their faults.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream;

use super::{InFlight, StreamFault};

/// The most characters of text or tool-call arguments one stream event
/// carries, so that every non-trivial answer arrives in several pieces and
/// a client must reassemble them.
pub const STREAM_PIECE_CHARS: usize = 8;

/// `text` in pieces of at most [`STREAM_PIECE_CHARS`] characters, split on
/// character boundaries; no pieces for empty text.
pub(crate) fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(STREAM_PIECE_CHARS)
        .map(|c| c.iter().collect())
        .collect()
}

/// One `data:` event (Chat Completions names no event type).
pub(crate) fn data_event(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// The message of a stream's in-band error: quoting `key_header` (the
/// request's key, as sent) when the mock echoes it.
pub(crate) fn error_message(key_header: Option<&str>) -> String {
    match key_header {
        Some(key) => format!("The server is overloaded (request had {key}); try again later."),
        None => "The server is overloaded; try again later.".to_owned(),
    }
}

/// One event with a type line (the Messages API names every event).
pub(crate) fn typed_event(event: &str, data: &str) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// The events of one streamed answer, before faults are applied.
pub(crate) struct Frames {
    /// Everything up to the terminator.
    pub(crate) body: Vec<String>,
    /// The terminator: `data: [DONE]` or `message_stop`.
    pub(crate) terminator: Vec<String>,
    /// An event whose data is cut mid-object, for [`StreamFault::Malformed`].
    pub(crate) malformed: String,
    /// The in-band error event, for [`StreamFault::Error`].
    pub(crate) error: String,
}

enum Step {
    Send(Bytes),
    Hold(Duration),
    Abort,
}

/// How a stream is to misbehave, resolved from the script.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Misbehaviour {
    None,
    Fault(StreamFault),
    /// [`super::Reply::LoseResponse`]: half the events, then an abort.
    Lose,
}

fn plan(frames: Frames, misbehaviour: Misbehaviour) -> VecDeque<Step> {
    let Frames {
        body,
        terminator,
        malformed,
        error,
    } = frames;
    let mut all: Vec<String> = body.iter().chain(terminator.iter()).cloned().collect();
    let send = |events: &[String]| -> Vec<Step> {
        events
            .iter()
            .map(|e| Step::Send(Bytes::from(e.clone())))
            .collect()
    };
    let steps: Vec<Step> = match misbehaviour {
        Misbehaviour::None => send(&all),
        Misbehaviour::Lose => {
            let mut s = send(&all[..all.len() / 2]);
            s.push(Step::Abort);
            s
        }
        Misbehaviour::Fault(StreamFault::Stall { after, hold }) => {
            let mut s = send(&all[..after.min(all.len())]);
            s.push(Step::Hold(hold));
            s.push(Step::Abort);
            s
        }
        Misbehaviour::Fault(StreamFault::Drop { after }) => {
            let mut s = send(&all[..after.min(all.len())]);
            s.push(Step::Abort);
            s
        }
        Misbehaviour::Fault(StreamFault::Malformed { after }) => {
            all.insert(after.min(all.len()), malformed);
            send(&all)
        }
        Misbehaviour::Fault(StreamFault::Error { after }) => {
            let mut s = send(&all[..after.min(all.len())]);
            s.push(Step::Send(Bytes::from(error)));
            s
        }
        Misbehaviour::Fault(StreamFault::NoTerminator) => send(&body),
    };
    steps.into()
}

struct BodyState {
    steps: VecDeque<Step>,
    sent_any: bool,
    interval: Duration,
    _in_flight: InFlight,
}

/// A `200 text/event-stream` response that sends `frames` as
/// `misbehaviour` says, waiting `interval` between two events. `in_flight`
/// lives as long as the body: until it ends, aborts, or is dropped with
/// the connection.
pub(crate) fn response(
    frames: Frames,
    misbehaviour: Misbehaviour,
    interval: Duration,
    in_flight: InFlight,
) -> Response {
    let state = BodyState {
        steps: plan(frames, misbehaviour),
        sent_any: false,
        interval,
        _in_flight: in_flight,
    };
    let events = stream::unfold(state, |mut st| async move {
        loop {
            match st.steps.pop_front()? {
                Step::Send(bytes) => {
                    if st.sent_any && !st.interval.is_zero() {
                        tokio::time::sleep(st.interval).await;
                    }
                    st.sent_any = true;
                    return Some((Ok(bytes), st));
                }
                Step::Hold(hold) => tokio::time::sleep(hold).await,
                Step::Abort => {
                    // Return Pending once so hyper flushes what was sent
                    // before it sees the error and aborts the connection.
                    tokio::task::yield_now().await;
                    return Some((
                        Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "rein-testkit: stream dropped by an injected fault",
                        )),
                        st,
                    ));
                }
            }
        }
    });
    let mut response = (StatusCode::OK, Body::from_stream(events)).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_on_character_boundaries() {
        assert!(pieces("").is_empty());
        assert_eq!(pieces("abc"), ["abc"]);
        let text = "héllo wörld, ünïcode";
        let p = pieces(text);
        assert!(p.len() > 2);
        assert!(p.iter().all(|p| p.chars().count() <= STREAM_PIECE_CHARS));
        assert_eq!(p.concat(), text);
    }
}
