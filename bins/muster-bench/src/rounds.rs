//! The loop every worker of the cycles, backlog and batch scenarios runs: rounds until its time
//! is up or the queue runs dry, errors counted (the first one kept) rather than ending the run.

use anyhow::Result;

/// What the rounds of one worker, or of a run's workers together, came to besides their
/// figures: the failed rounds, the first failure, and whether the queue ran dry.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) ran_dry: bool,
}

impl Tally {
    /// Records how a round went and answers whether the worker goes on: `Ok(true)` is a round
    /// done, `Ok(false)` an empty queue (which ends the loop), an error a failed round (counted;
    /// the loop goes on).
    pub(crate) fn go_on_after(&mut self, round: Result<bool>) -> bool {
        match round {
            Ok(done) => {
                self.ran_dry |= !done;
                done
            }
            Err(e) => {
                self.failed(format!("{e:#}"));
                true
            }
        }
    }

    /// One more failure; the first one's message is kept.
    pub(crate) fn failed(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    /// Adds another worker's tally: failures summed, the first message kept, dry if it ran dry.
    pub(crate) fn add(&mut self, other: Tally) {
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.ran_dry |= other.ran_dry;
    }
}

#[cfg(test)]
mod tests {
    use anyhow::anyhow;

    use super::Tally;

    #[test]
    fn rounds_go_on_after_a_failure_and_stop_at_an_empty_queue() {
        let mut answers = vec![Ok(false), Ok(true), Err("second"), Err("first"), Ok(true)];
        let mut tally = Tally::default();
        let mut rounds = 0;
        while tally.go_on_after(match answers.pop().expect("stopped at the empty queue") {
            Ok(done) => Ok(done),
            Err(e) => Err(anyhow!(e)),
        }) {
            rounds += 1;
        }
        assert!(answers.is_empty());
        assert_eq!(rounds, 4);
        assert_eq!((tally.errors, tally.ran_dry), (2, true));
        assert_eq!(tally.first_error.as_deref(), Some("first"));
    }

    #[test]
    fn tallies_add_up_and_keep_the_first_failure() {
        let mut all = Tally::default();
        all.add(Tally::default());
        all.add(Tally {
            errors: 2,
            first_error: Some("a".into()),
            ran_dry: false,
        });
        all.add(Tally {
            errors: 1,
            first_error: Some("b".into()),
            ran_dry: true,
        });
        assert_eq!((all.errors, all.ran_dry), (3, true));
        assert_eq!(all.first_error.as_deref(), Some("a"));
    }
}
