//! Scoring `judge`: the judge model's score when it passes the output, else 0; the note gives
//! its verdict and reason.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::JudgeAssertion;

impl Score for JudgeAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let got = on.subject.text();
        let verdict = on
            .graders
            .judge(&self.model, &self.rubric, &got, on.input)
            .await;
        match verdict {
            Ok(verdict) => {
                let score = if verdict.pass { verdict.score } else { 0.0 };
                let outcome = if verdict.pass { "pass" } else { "fail" };
                Scored::metric(score, &self.rubric, got).noted(format!(
                    "judge: {outcome} ({:.2}) — {}",
                    verdict.score, verdict.reason
                ))
            }
            Err(failure) => Scored::broken(&self.rubric, failure.message),
        }
    }
}
