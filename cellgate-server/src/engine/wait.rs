//! Fleet mode on an async runtime: a request is decided on the thread that read it, and a
//! check that needs Redis is awaited there, not waited for.
//!
//! A run in [`Mode::Answers`] charges what this server can decide (leases, spent leases
//! refused here); the first check that needs Redis ends the run with nothing charged (the
//! core gives back what the others took). That check is then sent to Redis and awaited, and
//! the request runs again with the answer: a run per cold check, in the request's order, as a
//! run that waits on its thread would check them. Each cold check waits at most until the
//! request's first cold check plus the bound, as there. A shadow descriptor's own charge comes
//! after the request is decided, so one that needs Redis is awaited the same way and charged
//! again on its own (the request's other charges final meanwhile).

use std::time::Instant;

use cellgate::Decision;

use super::backend::{Mode, Owner};
use super::decide::{self, Item, Ran};
use super::limiters::Lim;
use super::{response, Engine};
use crate::api::{RateLimitRequest, RateLimitResponse, RequestError};

/// How [`Engine::decide_async`] answered.
pub(crate) enum Awaited {
    /// Decided; `waited` when some check awaited Redis.
    Decided {
        response: RateLimitResponse,
        waited: bool,
    },
    /// Not decided, nothing charged: decide it with [`Engine::decide`] on a thread that may
    /// block (a check asked of Redis twice, which no run does).
    Blocking,
}

impl Engine {
    /// Decides `req` as [`decide`](Self::decide) does, awaiting Redis rather than blocking
    /// the thread.
    pub(crate) async fn decide_async(
        &self,
        req: &RateLimitRequest,
    ) -> Result<Awaited, RequestError> {
        let snapshot = self.state.load_full();
        let overrides = self.accept(&snapshot, req)?;
        let items = self.items(&snapshot, req, &overrides);
        let ratio = self.ratio();
        let mut answers: Vec<(Owner, Decision)> = Vec::new();
        let mut start = None;
        loop {
            let (mut statuses, waiting) = match decide::run(&items, ratio, Mode::Answers(&answers))
            {
                Ran::Done(statuses) => (statuses, Vec::new()),
                Ran::Shadowed(statuses, waiting) => (statuses, waiting),
                Ran::Wait(owner) => {
                    if !self.ask(&items, owner, &mut answers, &mut start).await {
                        return Ok(Awaited::Blocking);
                    }
                    continue;
                }
            };
            // The request is decided and charged; each shadow descriptor that needs Redis is
            // charged on its own once Redis has answered, as often as its checks need.
            // (No run asks a check twice; were it, the placeholder status stays: a shadow
            // descriptor's refusal, only reported.)
            for (i, mut owner) in waiting {
                while self.ask(&items, owner, &mut answers, &mut start).await {
                    match decide::shadow(&items, i, ratio, &answers) {
                        Ok(status) => {
                            statuses[i] = status;
                            break;
                        }
                        Err(next) => owner = next,
                    }
                }
            }
            return Ok(Awaited::Decided {
                response: response(&items, statuses),
                waited: !answers.is_empty(),
            });
        }
    }

    /// Asks Redis for check `owner` of `items` (waiting at most until the request's first cold
    /// check plus the bound) and records its answer; `false`, asking nothing, when it was
    /// answered already or is not a fleet limit's (no run asks so).
    async fn ask(
        &self,
        items: &[Item<'_>],
        owner: Owner,
        answers: &mut Vec<(Owner, Decision)>,
        start: &mut Option<Instant>,
    ) -> bool {
        if answers.iter().any(|(o, _)| *o == owner) {
            return false;
        }
        let (i, j) = owner;
        let Some((it, Lim::Fleet(f))) = items
            .get(i)
            .and_then(|it| Some((it, it.checks.get(j)?.lim)))
        else {
            return false;
        };
        let start = *start.get_or_insert_with(Instant::now);
        answers.push((owner, f.check_cold(&it.key, it.hits, start).await));
        true
    }
}
