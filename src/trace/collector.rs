//! The collector at the other end: an OTLP/HTTP endpoint that takes protobuf export requests.
//! It is sent each request with the headers the environment names (never printed, never
//! followed by a redirect), and its answer is read as OTLP says: a 2xx takes the batch, less the
//! spans a partial success says it rejected (an answer that is not OTLP changes nothing: the
//! status said yes); anything else — another status, a connection that fails or hangs, an answer
//! that is not HTTP — takes none.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::export::Collector;

/// Longest answer read from a collector; a longer one is taken as a plain success.
const ANSWER_LIMIT: usize = 64 * 1024;

/// An OTLP/HTTP traces endpoint.
pub struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
}

impl Http {
    /// The endpoint at `url` (http or https), sent `headers` (`name=value` pairs as the
    /// `OTEL_EXPORTER_OTLP_HEADERS` variables write them, values percent-encoded); a pair that
    /// is not a valid header is left out. Err says why the endpoint cannot be used, without
    /// repeating the URL or any header.
    pub fn new(url: &str, headers: &[String], timeout: Duration) -> Result<Http, String> {
        let url = reqwest::Url::parse(url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or("the OTLP endpoint is not an http:// or https:// URL")?;
        let mut map = HeaderMap::new();
        for (name, value) in headers.iter().flat_map(|list| pairs(list)) {
            map.insert(name, value);
        }
        map.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        let client = reqwest::Client::builder()
            .default_headers(map)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| "the HTTP client for the OTLP endpoint could not be built")?;
        Ok(Http { client, url })
    }
}

impl Collector for Http {
    async fn send(&self, request: Bytes, spans: u64) -> Result<u64, ()> {
        let post = self.client.post(self.url.clone()).body(request);
        let mut response = post.send().await.map_err(|_| ())?;
        if !response.status().is_success() {
            return Err(());
        }
        let mut answer = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            if answer.len() + chunk.len() > ANSWER_LIMIT {
                return Ok(0);
            }
            answer.extend_from_slice(&chunk);
        }
        Ok(rejected(&answer, spans))
    }
}

/// How many of `spans` a collector's answer says it rejected: a partial success's count (at
/// most all of them); none for an empty answer or one that is not OTLP (the status said yes).
fn rejected(answer: &[u8], spans: u64) -> u64 {
    let Ok(response) = ExportTraceServiceResponse::decode(answer) else {
        return 0;
    };
    let rejected = response.partial_success.map_or(0, |p| p.rejected_spans);
    u64::try_from(rejected).unwrap_or(0).min(spans)
}

/// The headers of one `OTEL_EXPORTER_OTLP_HEADERS` value: `name=value` pairs split at commas,
/// each value percent-decoded; pairs that are not valid headers are skipped.
fn pairs(list: &str) -> Vec<(HeaderName, HeaderValue)> {
    list.split(',')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .ok()?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            Some((name, HeaderValue::from_str(&value).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;

    use super::*;

    #[test]
    fn headers_are_name_value_pairs_with_percent_encoded_values() {
        let got = pairs("api-key=se%20cret, x-tenant = a=b ,broken,bad name=1,x-empty=");
        let got: Vec<(String, String)> = got
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().expect("text").to_string()))
            .collect();
        let want = [("api-key", "se cret"), ("x-tenant", "a=b"), ("x-empty", "")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_partial_success_counts_its_rejected_spans_and_garbage_counts_none() {
        let partial = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 3,
                error_message: "too old".into(),
            }),
        };
        assert_eq!(rejected(&partial.encode_to_vec(), 10), 3);
        assert_eq!(rejected(&partial.encode_to_vec(), 2), 2);
        assert_eq!(rejected(b"", 10), 0);
        assert_eq!(rejected(b"\xff\xff\xff not protobuf", 10), 0);
        let negative = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: -5,
                error_message: String::new(),
            }),
        };
        assert_eq!(rejected(&negative.encode_to_vec(), 10), 0);
    }

    #[test]
    fn an_endpoint_that_is_not_http_is_refused_without_repeating_it() {
        for url in ["ftp://secret@host/v1/traces", "not a url", "unix:///sock"] {
            let refused = Http::new(url, &[], Duration::from_secs(1))
                .err()
                .expect("refused");
            assert!(
                !refused.contains("secret") && !refused.contains("sock"),
                "{refused}"
            );
        }
        let headers = ["authorization=Bearer%20x".to_string()];
        assert!(
            Http::new(
                "https://collector:4318/v1/traces",
                &headers,
                Duration::from_secs(1)
            )
            .is_ok()
        );
    }
}
