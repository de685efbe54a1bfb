//! The RESP listener's decoder and command layer on arbitrary bytes: never a panic, every
//! reply well-formed (the whole output decodes as RESP frames); and a round trip: commands
//! encoded as RESP arrays decode back to the same arguments, whatever the read boundaries.
//!
//! Input: the first byte sets the read size (bytes per read, at least 1), the rest is the raw
//! input; the round trip takes its commands from the same rest, split at `0x01` into commands
//! and at `0x00` into arguments (so the seeds are plain RESP after one byte).
//!
//! Run: `cargo +nightly fuzz run resp_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

use cellgate_server::resp::fuzzing::{decode_all, process, LIMITS};

fn encode(commands: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    for args in commands {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// Every byte of `out` belongs to a complete, valid RESP frame.
fn well_formed(out: &[u8]) {
    let mut rest = out;
    while !rest.is_empty() {
        match redis_protocol::resp3::decode::complete::decode(rest) {
            Ok(Some((_, used))) if used > 0 => rest = &rest[used..],
            other => panic!(
                "malformed reply at {:?}: {other:?}",
                String::from_utf8_lossy(rest)
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, raw)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk);
    well_formed(&process(raw, chunk));

    let (max_args, max_bulk) = LIMITS;
    let commands: Vec<Vec<Vec<u8>>> = raw
        .split(|&b| b == 1)
        .map(|c| c.split(|&b| b == 0).map(<[u8]>::to_vec).collect::<Vec<_>>())
        .filter(|c| c.len() <= max_args && c.iter().all(|a| a.len() <= max_bulk))
        .collect();
    let decoded = decode_all(&encode(&commands)).expect("valid commands decode");
    let decoded: Vec<Vec<Vec<u8>>> = decoded
        .into_iter()
        .map(|c| c.into_iter().map(|a| a.to_vec()).collect())
        .collect();
    assert_eq!(decoded, commands);
    // Answering them never panics and gives well-formed replies either.
    well_formed(&process(&encode(&commands), chunk));
});
