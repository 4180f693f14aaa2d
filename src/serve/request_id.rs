//! The caller's request id: `X-Request-Id`, when a request carries one, is checked (at most
//! [`MAX_LEN`] printable ASCII characters; anything else is refused with 400, so a caller never
//! looks for an id the server silently dropped), handed to the run it starts — its record's
//! `request_id` and every one of its events carry it — and echoed on the response, so one id
//! follows a request through a proxy's log, the server's events file and the client. Without
//! the header the server invents none: the record's `run_id` names the run.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use super::app::{App, Refused, refuse};
use crate::core::{Failure, FailureCode};

/// The header it comes in and goes back out in.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken.
pub const MAX_LEN: usize = 128;

/// A request's checked id, for the handler that starts its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The id `headers` carry: none without the header, refused when it is empty, longer than
/// [`MAX_LEN`], or not all printable ASCII (spaces included).
fn given(headers: &HeaderMap) -> Result<Option<RequestId>, Failure> {
    let Some(value) = headers.get(&HEADER) else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    let printable = bytes.iter().all(|byte| (b' '..=b'~').contains(byte));
    if bytes.is_empty() || bytes.len() > MAX_LEN || !printable {
        return Err(Failure::new(
            FailureCode::ConfigInvalidInput,
            format!("`{HEADER}` must be 1 to {MAX_LEN} printable ASCII characters"),
        )
        .with_help("send a shorter id of letters, digits and punctuation, or none"));
    }
    Ok(Some(RequestId(String::from_utf8_lossy(bytes).into_owned())))
}

/// Checks a request's id, hands it to the handler and echoes it on the response.
pub async fn carry(State(app): State<App>, mut request: Request, next: Next) -> Response {
    let id = match given(request.headers()) {
        Ok(id) => id,
        Err(failure) => return refuse(&app, Refused::bad_request(failure)),
    };
    let Some(id) = id else {
        return next.run(request).await;
    };
    let echoed = HeaderValue::from_str(&id.0);
    request.extensions_mut().insert(id);
    let mut response = next.run(request).await;
    if let Ok(echoed) = echoed {
        response.headers_mut().insert(HEADER, echoed);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            HEADER,
            HeaderValue::from_bytes(value).expect("a header value"),
        );
        headers
    }

    #[test]
    fn an_id_of_printable_ascii_is_taken_whole_and_none_is_invented() {
        assert_eq!(given(&HeaderMap::new()), Ok(None));
        let id = "req-42 /a:b~".as_bytes();
        assert_eq!(
            given(&with_id(id)),
            Ok(Some(RequestId("req-42 /a:b~".into())))
        );
        let longest = vec![b'x'; MAX_LEN];
        assert!(matches!(given(&with_id(&longest)), Ok(Some(_))));
    }

    #[test]
    fn an_empty_long_or_unprintable_id_is_refused_with_its_limits() {
        let too_long = vec![b'x'; MAX_LEN + 1];
        for bad in [&b""[..], &too_long, b"tab\there", "caf\u{e9}".as_bytes()] {
            let failure = given(&with_id(bad)).expect_err("refused");
            assert_eq!(failure.code, FailureCode::ConfigInvalidInput);
            assert!(
                failure.message.contains("128 printable ASCII"),
                "{failure:?}"
            );
        }
    }
}
