//! Extremes built or refused as the models say, and inputs that once failed.

use super::*;

#[test]
fn extremes_build_or_refuse() {
    // A few hand-picked inputs through the same path as the fuzzer.
    for ctor in [
        Ctor::Gcra {
            count: X32::Max,
            period: XDur::OneNs,
            burst: None,
        },
        Ctor::Gcra {
            count: X32::One,
            period: XDur::U64MaxNs,
            burst: Some(X32::Two),
        },
        Ctor::GcraInterval {
            interval: XDur::DurationMax,
            burst: None,
        },
        Ctor::FixedWindow {
            limit: X32::LayoutMax(0),
            window: XDur::OneNs,
        },
        Ctor::SlidingWindow {
            limit: X32::LayoutMax(1),
            window: XDur::U64MaxNs,
        },
        Ctor::Stock { units: X32::Max },
        Ctor::SlidingLog {
            limit: X32::LayoutMax(0),
            window: XDur::JustTooLong,
        },
    ] {
        for store in [
            StoreSel::Direct,
            StoreSel::Table(XKeys::Zero),
            StoreSel::Table(XKeys::TableMaxPlus1),
            StoreSel::Table(XKeys::UsizeMax),
            StoreSel::Table(XKeys::TableMax),
            StoreSel::Map(Some(XKeys::UsizeMax)),
            StoreSel::Map(None),
        ] {
            run(&Input {
                ctor,
                store,
                ops: vec![
                    XOp::SetTime(XTime::NearMax(1)),
                    XOp::Check {
                        key: 0,
                        n: X32::Max,
                    },
                    XOp::Probe { key: 0 },
                    XOp::CheckSmall { key: 1, n: 1 },
                    XOp::FollowRetry,
                    XOp::SetTime(XTime::Zero),
                    XOp::Burst { key: 0, times: 15 },
                    XOp::FollowRetry,
                    XOp::EvictIdle,
                    XOp::Restock {
                        key: 0,
                        units: X64::Max,
                    },
                    XOp::Probe { key: 0 },
                ],
            });
        }
    }
}

crate::corpus_tests!("extreme_config", run);
