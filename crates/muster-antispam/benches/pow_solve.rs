//! Times the reference solver at the default difficulty (`cargo bench -p muster-antispam`).
//! A native build is several times faster than a browser's WebAssembly or JavaScript, so the
//! browser's time is roughly this times the expected number of tries over the found one.

use std::time::Instant;

use muster_antispam::pow::{self, ChallengeKey, DEFAULT_DIFFICULTY};
use time::OffsetDateTime;

fn main() {
    let key = ChallengeKey::from_bytes([42; 32]);
    let mut total_tries: u64 = 0;
    let started = Instant::now();
    let rounds: u8 = 8;
    for round in 0..rounds {
        let challenge = pow::issue(
            &key,
            OffsetDateTime::UNIX_EPOCH,
            DEFAULT_DIFFICULTY,
            [round; 16],
        );
        let nonce = pow::solve(&challenge.token, DEFAULT_DIFFICULTY, u64::MAX).unwrap_or_default();
        total_tries += nonce.parse::<u64>().unwrap_or(0) + 1;
    }
    let elapsed = started.elapsed();
    let per_hash = elapsed.as_secs_f64() / total_tries as f64;
    println!(
        "difficulty {DEFAULT_DIFFICULTY}: {rounds} challenges, {total_tries} hashes in {elapsed:?} \
         ({:.0} ns/hash; expected 2^{DEFAULT_DIFFICULTY} = {} hashes per challenge takes {:.3} s)",
        per_hash * 1e9,
        1u64 << DEFAULT_DIFFICULTY,
        per_hash * (1u64 << DEFAULT_DIFFICULTY) as f64,
    );
}
