//! The answer of a composite limit (docs/composites.md): a call of a name
//! made of other limits is consumed from every member, all or nothing,
//! and answered with one row.
//!
//! - `ok` when every member admits (as `rate_limit_all` of the members);
//! - `remaining` the least of the members': of an admitted call after it,
//!   of a refused one now (nothing was consumed): the least of the
//!   refusing members', since a member that would have admitted holds at
//!   least `count` and a refusing one less;
//! - `retry_after` of a refusal the greatest of the refusing members':
//!   every kind recovers steadily while nothing consumes, so by then every
//!   member that refused admits again and the others still admit; of an
//!   admitted call the greatest reservation's;
//! - the member that refused longest names the refusal (its DETAIL);
//! - in shadow mode (`enforce = false`) a refusal is answered as admitted
//!   with no `retry_after`, each refusing member counted as a shadow
//!   refusal; what was consumed is what the enforcing call consumed
//!   (nothing, for a refusal).

use crate::all_or_nothing::Answer;
use crate::verdict::Verdict;

/// A composite's answer: the one row the call returns, which member (an
/// index into the answers) refused longest, and what each member's
/// answer counts as.
#[derive(Debug, Clone, PartialEq)]
pub struct Combined {
    pub answer: Answer,
    pub longest: Option<usize>,
    pub verdicts: Vec<Verdict>,
}

/// Combines the members' answers (`answers[i]` member `i`'s, at least one)
/// into the composite's, enforcing or in shadow mode.
pub fn combine(answers: &[Answer], enforce: bool) -> Combined {
    let refused = answers.iter().any(|answer| !answer.ok);
    let remaining = answers
        .iter()
        .filter(|answer| !refused || !answer.ok)
        .map(|answer| answer.remaining)
        .fold(f64::INFINITY, f64::min);
    let mut longest: Option<usize> = None;
    for (index, answer) in answers.iter().enumerate() {
        if !answer.ok && longest.is_none_or(|at| answer.retry_after > answers[at].retry_after) {
            longest = Some(index);
        }
    }
    let verdicts = answers.iter().map(|answer| answer.verdict).collect();
    match longest {
        Some(at) if enforce => Combined {
            answer: Answer {
                ok: false,
                retry_after: answers[at].retry_after,
                remaining,
                verdict: Verdict::Refused,
            },
            longest,
            verdicts,
        },
        Some(_) => Combined {
            answer: Answer {
                ok: true,
                retry_after: None,
                remaining,
                verdict: Verdict::ShadowRefused,
            },
            longest,
            verdicts: answers
                .iter()
                .map(|answer| match answer.verdict {
                    Verdict::Refused => Verdict::ShadowRefused,
                    verdict => verdict,
                })
                .collect(),
        },
        None => Combined {
            answer: Answer {
                ok: true,
                retry_after: answers.iter().filter_map(|answer| answer.retry_after).max(),
                remaining,
                verdict: Verdict::Admitted,
            },
            longest: None,
            verdicts,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(ok: bool, retry_after: Option<i64>, remaining: f64) -> Answer {
        Answer {
            ok,
            retry_after,
            remaining,
            verdict: if ok {
                Verdict::Admitted
            } else {
                Verdict::Refused
            },
        }
    }

    #[test]
    fn admitted_when_every_member_admits_with_the_least_remaining() {
        let combined = combine(&[answer(true, None, 7.0), answer(true, None, 2.5)], true);
        assert_eq!(combined.answer, answer(true, None, 2.5));
        assert_eq!(combined.longest, None);
    }

    #[test]
    fn a_reservation_waits_for_the_latest_member() {
        let combined = combine(
            &[answer(true, Some(5), -1.0), answer(true, Some(9), 3.0)],
            true,
        );
        assert_eq!(combined.answer, answer(true, Some(9), -1.0));
    }

    #[test]
    fn refused_for_the_longest_refusal_naming_that_member() {
        let answers = [
            answer(false, Some(100), 0.0),
            answer(true, None, 5.0),
            answer(false, Some(3_000), 0.5),
        ];
        let combined = combine(&answers, true);
        assert_eq!(combined.answer, answer(false, Some(3_000), 0.0));
        // The admitted member's remaining is after a consumption that was
        // not made: not the answer's.
        let answers = [answer(true, None, 0.0), answer(false, Some(10), 4.0)];
        assert_eq!(combine(&answers, true).answer.remaining, 4.0);
        assert_eq!(combined.longest, Some(2));
        assert_eq!(
            combined.verdicts,
            vec![Verdict::Refused, Verdict::Admitted, Verdict::Refused]
        );
    }

    #[test]
    fn shadow_mode_answers_a_refusal_as_admitted() {
        let answers = [answer(false, Some(100), 0.25), answer(true, None, 5.0)];
        let combined = combine(&answers, false);
        assert!(combined.answer.ok);
        assert_eq!(combined.answer.retry_after, None);
        assert_eq!(combined.answer.remaining, 0.25);
        assert_eq!(combined.longest, Some(0));
        assert_eq!(
            combined.verdicts,
            vec![Verdict::ShadowRefused, Verdict::Admitted]
        );
    }
}
