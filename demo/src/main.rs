//! The rate_limiter demo: a chat app, a global sign-up limit guarded by a
//! trigger, an LLM token budget with reservations, and two budgets charged
//! together (`rate_limit_all`) and settled (`rate_credit`), run through a real
//! client against a real server. Time is set with
//! `rate_limiter.now_override` so the report is reproducible; every answer
//! is checked against the pure model (`rate_limiter_algorithm`), and a last
//! part hammers a limit from 8 connections on the real clock.
//!
//! Connection string: `RATE_LIMITER_DEMO_URL` (set by scripts/demo.sh).

use postgres::{Client, NoTls};
use rate_limiter_algorithm::{evaluate, Config, Kind, LimitId, Micros, Request, State};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const SECOND: Micros = 1_000_000;
/// One unit, no reservation: the demo's usual request.
const ONE: Request = Request {
    count: 1.0,
    reserve: false,
};
/// 2026-01-01 09:00:00 UTC in microseconds since 2000-01-01.
const T0: Micros = 820_573_200 * SECOND;

/// Mirrors every call with the pure model and counts agreements.
struct Model {
    states: HashMap<(String, Option<String>), State>,
    agreed: u32,
    checked: u32,
}

impl Model {
    fn check(
        &mut self,
        config: &Config,
        name: &str,
        key: Option<&str>,
        now: Micros,
        request: Request,
        answer: (bool, Option<f64>, f64),
    ) {
        let slot = (name.to_string(), key.map(str::to_string));
        let decision = evaluate(
            config,
            LimitId {
                name: name.as_bytes(),
                key: key.map(str::as_bytes),
            },
            self.states.get(&slot).copied(),
            now,
            request,
        )
        .expect("valid demo call");
        if let Some(state) = decision.new_state {
            self.states.insert(slot, state);
        }
        let expected_retry = decision
            .retry_after
            .map(|micros| micros as f64 / SECOND as f64);
        let agrees = decision.ok == answer.0
            && expected_retry == answer.1
            && (decision.remaining - answer.2).abs() < 1e-9;
        self.checked += 1;
        if agrees {
            self.agreed += 1;
        } else {
            println!("   !! model disagrees: expected {decision:?}, server said {answer:?}");
        }
    }

    /// A rolled-back call consumed nothing: forget the model's update.
    fn rollback(&mut self, name: &str, key: Option<&str>, before: Option<State>) {
        let slot = (name.to_string(), key.map(str::to_string));
        match before {
            Some(state) => self.states.insert(slot, state),
            None => self.states.remove(&slot),
        };
    }

    /// A credit of `count` tokens: the model's value afterwards must be the
    /// server's (`value`).
    fn credit(
        &mut self,
        config: &Config,
        name: &str,
        key: Option<&str>,
        now: Micros,
        count: f64,
        value: f64,
    ) {
        let slot = (name.to_string(), key.map(str::to_string));
        let expected = match self.states.get(&slot).copied() {
            Some(state) => {
                let after = rate_limiter_algorithm::credit(config, &[state], count, now)[0];
                self.states.insert(slot, after);
                after.value
            }
            None => config.capacity(), // no row: already full
        };
        self.checked += 1;
        if (expected - value).abs() < 1e-9 {
            self.agreed += 1;
        } else {
            println!(
                "   !! model disagrees: expected {expected} after the credit, server said {value}"
            );
        }
    }

    fn state(&self, name: &str, key: Option<&str>) -> Option<State> {
        self.states
            .get(&(name.to_string(), key.map(str::to_string)))
            .copied()
    }
}

/// Sets `rate_limiter.now_override` to `now`.
fn set_time(client: &mut Client, now: Micros) {
    let seconds = (now - T0) as f64 / SECOND as f64;
    client
        .query_one(
            "SELECT set_config('rate_limiter.now_override', \
             ('2026-01-01 09:00:00+00'::timestamptz + make_interval(secs => $1))::text, false)",
            &[&seconds],
        )
        .unwrap();
}

/// Calls rate_limit and returns (ok, retry_after in seconds, remaining).
fn limit(
    client: &mut impl postgres::GenericClient,
    name: &str,
    key: Option<&str>,
    count: f64,
    reserve: bool,
) -> (bool, Option<f64>, f64) {
    let row = client
        .query_one(
            "SELECT ok, extract(epoch FROM retry_after)::float8, remaining \
             FROM rate_limiter.rate_limit($1, $2, $3, reserve => $4)",
            &[&name, &key, &count, &reserve],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn seconds(retry: Option<f64>) -> String {
    retry.map_or_else(String::new, |s| format!("{s} s"))
}

fn main() {
    let url = std::env::var("RATE_LIMITER_DEMO_URL")
        .expect("RATE_LIMITER_DEMO_URL (run scripts/demo.sh)");
    let mut client = Client::connect(&url, NoTls).expect("connect to the demo server");
    let version: String = client.query_one("SHOW server_version", &[]).unwrap().get(0);
    println!("rate_limiter demo on PostgreSQL {version} (a throwaway cluster)\n");
    client
        .batch_execute(
            "CREATE EXTENSION IF NOT EXISTS rate_limiter;
             CREATE TABLE messages (id bigserial PRIMARY KEY, sender text NOT NULL, body text NOT NULL CHECK (body <> ''));
             CREATE TABLE signups (email text PRIMARY KEY);
             CREATE TRIGGER guard_signup BEFORE INSERT ON signups FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('signup');
             SELECT rate_limiter.define('chat', rate_limiter.token_bucket(10, '1 minute', capacity => 3));
             SELECT rate_limiter.define('signup', rate_limiter.fixed_window(5, '1 minute', start => '2026-01-01'));
             SELECT rate_limiter.define('llm', rate_limiter.token_bucket(40000, '1 minute', max_reserved => 40000));",
        )
        .unwrap();
    let chat = Config {
        kind: Kind::TokenBucket,
        rate: 10.0,
        period: 60 * SECOND,
        capacity: Some(3.0),
        max_reserved: None,
        shards: 1,
        start: None,
        block: None,
        calendar: None,
    };
    let signup = Config {
        kind: Kind::FixedWindow,
        rate: 5.0,
        period: 60 * SECOND,
        capacity: None,
        max_reserved: None,
        shards: 1,
        start: Some(820_540_800 * SECOND),
        block: None,
        calendar: None,
    };
    let llm = Config {
        kind: Kind::TokenBucket,
        rate: 40000.0,
        period: 60 * SECOND,
        capacity: None,
        max_reserved: Some(40000.0),
        shards: 1,
        start: None,
        block: None,
        calendar: None,
    };
    let mut model = Model {
        states: HashMap::new(),
        agreed: 0,
        checked: 0,
    };

    println!("1. Chat: each user may send 10 messages a minute, in bursts of up to 3");
    println!(
        "   rate_limiter.define('chat', rate_limiter.token_bucket(10, '1 minute', capacity => 3))"
    );
    let sends: &[(f64, &str, &str)] = &[
        (0.0, "alice", "hi!"),
        (0.0, "alice", "are you there?"),
        (0.0, "alice", "hello??"),
        (0.0, "alice", "HELLO"),
        (0.0, "bob", "hey alice"),
        (2.0, "alice", "sorry"),
        (6.0, "alice", "ok, now"),
        (6.0, "alice", "one more"),
        (12.0, "alice", ""),
        (12.0, "alice", "one more"),
    ];
    for &(at, user, body) in sends {
        let now = T0 + (at * SECOND as f64) as Micros;
        set_time(&mut client, now);
        let before = model.state("chat", Some(user));
        let mut transaction = client.transaction().unwrap();
        let answer = limit(&mut transaction, "chat", Some(user), 1.0, false);
        model.check(&chat, "chat", Some(user), now, ONE, answer);
        let outcome = if !answer.0 {
            transaction.rollback().unwrap();
            format!("refused, retry after {}", seconds(answer.1))
        } else {
            match transaction.execute(
                "INSERT INTO messages (sender, body) VALUES ($1, $2)",
                &[&user, &body],
            ) {
                Ok(_) => {
                    transaction.commit().unwrap();
                    format!("sent ({} left)", answer.2)
                }
                Err(_) => {
                    drop(transaction); // rolls back: the token comes back
                    model.rollback("chat", Some(user), before);
                    "INSERT failed (empty body): rolled back, token returned".to_string()
                }
            }
        };
        println!(
            "   t={at:>4}s  {user:<5} {:<18} -> {outcome}",
            format!("{body:?}")
        );
    }
    let stored: i64 = client
        .query_one("SELECT count(*) FROM messages", &[])
        .unwrap()
        .get(0);
    println!("   messages stored: {stored}\n");

    println!("2. Sign-ups: 5 a minute for the whole site, enforced by a BEFORE INSERT trigger");
    println!("   (EXECUTE FUNCTION rate_limiter.guard('signup'): a refusal raises SQLSTATE RL429 with a JSON DETAIL)");
    set_time(&mut client, T0 + 30 * SECOND);
    for i in 1..=7 {
        let email = format!("user{i}@example.com");
        let (answer, outcome) = match client.execute("INSERT INTO signups VALUES ($1)", &[&email]) {
            Ok(_) => ((true, None, 4.0 - (i - 1) as f64), "signed up".to_string()),
            Err(error) => {
                let db = error.as_db_error().expect("a server error");
                let detail = db.detail().unwrap_or_default();
                let json: serde_json::Value = serde_json::from_str(detail).expect("a JSON DETAIL");
                let retry_ms = json["retry_after_ms"].as_f64().expect("retry_after_ms");
                let outcome = format!("{} {}: {detail}", db.code().code(), db.message());
                ((false, Some(retry_ms / 1000.0), 0.0), outcome)
            }
        };
        model.check(&signup, "signup", None, T0 + 30 * SECOND, ONE, answer);
        println!("   t=  30s  {email:<20} -> {outcome}");
    }
    set_time(&mut client, T0 + 60 * SECOND);
    client
        .execute("INSERT INTO signups VALUES ('user6@example.com')", &[])
        .unwrap();
    model.check(
        &signup,
        "signup",
        None,
        T0 + 60 * SECOND,
        ONE,
        (true, None, 4.0),
    );
    println!("   t=  60s  user6@example.com    -> signed up (a new window opened)\n");

    println!("3. LLM budget: 40,000 tokens a minute per organisation; big requests reserve");
    println!("   capacity and learn when to run (max_reserved => 40000)");
    set_time(&mut client, T0);
    for (i, &tokens) in [12000.0, 25000.0, 9000.0, 30000.0, 10000.0]
        .iter()
        .enumerate()
    {
        let answer = limit(&mut client, "llm", Some("org-1"), tokens, true);
        model.check(
            &llm,
            "llm",
            Some("org-1"),
            T0,
            Request {
                count: tokens,
                reserve: true,
            },
            answer,
        );
        let what = match answer {
            (true, None, left) => format!("run now ({left} tokens left)"),
            (true, Some(at), debt) => {
                format!("reserved: schedule it in {at} s (budget owes {})", -debt)
            }
            (false, retry, _) => format!(
                "refused: the debt would exceed 40,000; retry after {}",
                seconds(retry)
            ),
        };
        println!("   request {}: {tokens:>6} tokens -> {what}", i + 1);
    }
    println!();

    println!("4. Settling: an organisation's and a user's LLM budgets are charged together");
    println!("   (rate_limit_all: both or neither), then the unused part of the estimate is");
    println!("   given back to both (rate_credit): reserve 1,000, use 612, credit 388");
    println!("   rate_limiter.define('llm-user', rate_limiter.token_bucket(5000, '1 minute'))");
    client
        .batch_execute(
            "SELECT rate_limiter.define('llm-user', rate_limiter.token_bucket(5000, '1 minute'))",
        )
        .unwrap();
    let llm_user = Config {
        rate: 5000.0,
        max_reserved: None,
        ..llm
    };
    let members = [("llm", "org-2", &llm), ("llm-user", "dana", &llm_user)];
    for (i, &(estimate, used)) in [(1000.0, 612.0), (3000.0, 2950.0), (2000.0, 0.0)]
        .iter()
        .enumerate()
    {
        let now = T0 + (i as Micros) * SECOND;
        set_time(&mut client, now);
        let befores: Vec<Option<State>> = members
            .iter()
            .map(|&(name, key, _)| model.state(name, Some(key)))
            .collect();
        let mut transaction = client.transaction().unwrap();
        let rows = transaction
            .query(
                "SELECT ok, extract(epoch FROM retry_after)::float8, remaining \
                 FROM rate_limiter.rate_limit_all(ARRAY[ROW('llm', 'org-2', $1, NULL), ROW('llm-user', 'dana', $1, NULL)]::rate_limiter.request[])",
                &[&estimate],
            )
            .unwrap();
        let answers: Vec<(bool, Option<f64>, f64)> = rows
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        for (&(name, key, config), &answer) in members.iter().zip(&answers) {
            model.check(
                config,
                name,
                Some(key),
                now,
                Request {
                    count: estimate,
                    reserve: false,
                },
                answer,
            );
        }
        if answers.iter().all(|answer| answer.0) {
            // ... the model call used `used` tokens; give back the rest.
            let mut values = Vec::new();
            for &(name, key, config) in &members {
                let value: f64 = transaction
                    .query_one(
                        "SELECT rate_limiter.rate_credit($1, $2, $3)",
                        &[&name, &key, &(estimate - used)],
                    )
                    .unwrap()
                    .get(0);
                model.credit(config, name, Some(key), now, estimate - used, value);
                values.push(value);
            }
            transaction.commit().unwrap();
            println!(
                "   t={i:>2}s  estimate {estimate:>5}, used {used:>5} -> charged both; after the credit org-2 has {}, dana has {}",
                values[0], values[1]
            );
        } else {
            transaction.rollback().unwrap();
            for (&(name, key, _), before) in members.iter().zip(befores) {
                model.rollback(name, Some(key), before);
            }
            let short: Vec<String> = members
                .iter()
                .zip(&answers)
                .filter(|(_, answer)| !answer.0)
                .map(|(&(name, key, _), answer)| {
                    format!("{name}/{key} (retry after {})", seconds(answer.1))
                })
                .collect();
            println!(
                "   t={i:>2}s  estimate {estimate:>5} -> refused by {}; neither budget was charged",
                short.join(", ")
            );
        }
    }
    println!();

    println!("5. Live: 8 connections hammer 'signup-live' (token bucket, 100 a second,");
    println!("   capacity 20) for 2 seconds on the real clock, each call its own transaction");
    client.batch_execute("SELECT rate_limiter.define('signup-live', rate_limiter.token_bucket(100, '1 second', capacity => 20))").unwrap();
    let start: f64 = client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0);
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(&url, NoTls).unwrap();
                let statement = client
                    .prepare("SELECT ok FROM rate_limiter.rate_limit('signup-live')")
                    .unwrap();
                let (mut admitted, mut refused) = (0u64, 0u64);
                let begin = Instant::now();
                while begin.elapsed() < Duration::from_secs(2) {
                    if client.query_one(&statement, &[]).unwrap().get::<_, bool>(0) {
                        admitted += 1
                    } else {
                        refused += 1
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let (admitted, refused) = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let end: f64 = client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0);
    let bound = 20.0 + 100.0 * (end - start);
    println!("   {} calls: {admitted} admitted, {refused} refused; the bound 20 + 100 x {:.2} s = {bound:.1}", admitted + refused, end - start);
    println!(
        "   {}",
        if admitted as f64 <= bound {
            "never exceeded"
        } else {
            "EXCEEDED"
        }
    );
    // What the server counted (rate_limiter.stats: the library is preloaded).
    let counted = client.query_one(
        "SELECT calls, admitted, refused FROM rate_limiter.stats WHERE name = 'signup-live'",
        &[],
    );
    let stats_agree = match counted {
        Ok(row) => {
            let (calls, server_admitted, server_refused): (i64, i64, i64) =
                (row.get(0), row.get(1), row.get(2));
            println!("   rate_limiter.stats counted {calls} calls: {server_admitted} admitted, {server_refused} refused");
            server_admitted as u64 == admitted && server_refused as u64 == refused
        }
        Err(error) => {
            println!("   (rate_limiter.stats: {error})");
            true
        }
    };
    println!();

    println!("Every answer in parts 1-4 was checked against the formulas (the pure model):");
    println!("{} of {} agree.\n", model.agreed, model.checked);
    if model.agreed != model.checked || admitted as f64 > bound || !stats_agree {
        std::process::exit(1);
    }
}
