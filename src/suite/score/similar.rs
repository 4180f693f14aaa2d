//! Scoring `similar`: the cosine similarity, clamped to 0..1, of the output's and the reference
//! text's embeddings, by the scorer the graders hand out for the assertion's model.

use super::{Score, Scored, Scoring};
use crate::plan::suite::assertions::SimilarAssertion;

impl Score for SimilarAssertion {
    async fn score(&self, on: &Scoring<'_>) -> Scored {
        let reference = &self.value;
        let got = on.subject.text();
        let scored = on
            .graders
            .similarity(self.model.as_deref())
            .and_then(|scorer| Ok((scorer.score(reference, &[got.as_str()])?, scorer.name())));
        match scored {
            Ok((scores, scorer)) => {
                let cosine = scores.values.first().copied().unwrap_or(0.0);
                Scored::metric(cosine.clamp(0.0, 1.0), reference, got)
                    .noted(format!("similarity {cosine:.3} ({scorer})"))
            }
            Err(failure) => Scored::broken(reference, failure.message),
        }
    }
}
