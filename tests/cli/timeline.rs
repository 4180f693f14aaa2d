//! Timelines and correlation: every event carries its wall-clock `at` and every record its
//! `started_at` and `ended_at` (RFC 3339, UTC, milliseconds); `serve` carries a caller's
//! `X-Request-Id` into the run's record and events and echoes it on the answer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::pagantic;
use crate::serve::Server;

/// Milliseconds since the Unix epoch of `YYYY-MM-DDTHH:MM:SS.mmmZ`, or None when `text` is not
/// exactly that (Howard Hinnant's `days_from_civil`).
fn epoch_millis(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let shape = bytes.len() == 24
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            10 => *b == b'T',
            13 | 16 => *b == b':',
            19 => *b == b'.',
            23 => *b == b'Z',
            _ => b.is_ascii_digit(),
        });
    if !shape {
        return None;
    }
    let number = |from: usize, to: usize| text[from..to].parse::<i64>().ok();
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second, millis) = (
        number(11, 13)?,
        number(14, 16)?,
        number(17, 19)?,
        number(20, 23)?,
    );
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some((((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + millis)
}

/// `text` as epoch milliseconds, which must be within ten minutes of now (the clock is UTC).
fn recent(text: &Value) -> i64 {
    let at = text
        .as_str()
        .and_then(epoch_millis)
        .unwrap_or_else(|| panic!("not an RFC 3339 UTC timestamp with milliseconds: {text}"));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis();
    let now = i64::try_from(now).expect("milliseconds fit");
    assert!(
        (now - at).abs() < 600_000,
        "{text} is not now ({now} ms since the epoch)"
    );
    at
}

#[test]
fn the_reader_parses_what_rfc_3339_says_and_nothing_else() {
    assert_eq!(epoch_millis("1970-01-01T00:00:00.000Z"), Some(0));
    assert_eq!(
        epoch_millis("2000-03-01T00:00:01.250Z"),
        Some(951_868_801_250)
    );
    for bad in [
        "1970-01-01T00:00:00Z",
        "1970-01-01 00:00:00.000Z",
        "1970-13-01T00:00:00.000Z",
        "1970-01-01T00:00:00.000+00:00",
    ] {
        assert_eq!(epoch_millis(bad), None, "{bad}");
    }
}

#[test]
fn every_event_and_record_says_when_by_the_wall_clock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events_file = dir.path().join("events.jsonl");
    let events = format!("--events={}", events_file.display());
    let plan = "tests/plans/serve/echo.yaml";
    let run = pagantic(&["run", "--format=json", &events, "-i", "question=hi", plan]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let record: Value = serde_json::from_str(&run.stdout).expect("the record");
    let events = crate::events_in(&events_file);
    assert!(events.len() >= 8, "{events:?}");
    let times: Vec<i64> = events.iter().map(|event| recent(&event["at"])).collect();
    assert!(
        times.windows(2).all(|pair| pair[0] <= pair[1]),
        "the events' times go forward: {times:?}"
    );
    let (started, ended) = (recent(&record["started_at"]), recent(&record["ended_at"]));
    assert!(started <= ended, "{record}");
    assert!(
        ended >= *times.last().expect("an event") - 1,
        "the run ends after its last event: {record}"
    );
    for step in record["steps"].as_array().expect("steps") {
        let (step_started, step_ended) = (recent(&step["started_at"]), recent(&step["ended_at"]));
        assert!(step_started <= step_ended, "{step}");
    }
}

/// The `data:` of every server-sent event in `text`, as JSON.
fn sse_data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).expect("JSON data"))
        .collect()
}

#[tokio::test]
async fn serve_carries_the_caller_s_request_id_into_the_record_the_events_and_the_answer() {
    let mut server = Server::start(&["tests/plans/serve/echo.yaml"], &[]);
    let listening = server.wait_for_line(|line| line.contains("listening on http://"));
    let base = listening
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|address| format!("http://{address}/v1/plans/echo/runs"))
        .expect("an address");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("a client");
    let send = |id: Option<&str>, stream: bool| {
        let mut request = client.post(&base).json(&json!({ "question": "hi" }));
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        if stream {
            request = request.header("accept", "text/event-stream");
        }
        request.send()
    };

    let answer = send(Some("trace-7/a"), false).await.expect("an answer");
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()["x-request-id"], "trace-7/a");
    let record: Value = answer.json().await.expect("the record");
    assert_eq!(record["request_id"], "trace-7/a");
    recent(&record["started_at"]);

    let answer = send(Some("trace-8"), true).await.expect("an answer");
    assert_eq!(answer.headers()["x-request-id"], "trace-8");
    let streamed = sse_data(&answer.text().await.expect("the stream"));
    let (record, events) = streamed.split_last().expect("events then the record");
    assert_eq!(record["request_id"], "trace-8");
    assert!(events.len() >= 8, "{events:?}");
    for event in events {
        assert_eq!(event["request_id"], "trace-8", "{event}");
        recent(&event["at"]);
    }

    let answer = send(None, false).await.expect("an answer");
    assert!(answer.headers().get("x-request-id").is_none());
    let record: Value = answer.json().await.expect("the record");
    assert!(
        record.get("request_id").is_none(),
        "none is invented: {record}"
    );

    let too_long = "x".repeat(129);
    let answer = send(Some(&too_long), false).await.expect("an answer");
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    let refusal: Value = answer.json().await.expect("the refusal");
    assert_eq!(
        refusal["error"]["code"], "CONFIG_INVALID_INPUT",
        "{refusal}"
    );
}
