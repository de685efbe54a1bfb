//! Loom models of `cellgate-http`'s metrics rows: the file that holds the recording protocol
//! (`cellgate-http/src/sync/rows.rs`, in the one module of that crate naming an atomic, an
//! ordering or a lock) is included here as it ships, and under `cfg(loom)` its counters are
//! loom atomics and its table lock a loom mutex. This crate cannot depend on `cellgate-http`
//! (tokio and hyper do not build under `--cfg loom`), hence the `#[path]` include.
//!
//! The thread-local that keeps each thread's row, and the destructor that gives the row back
//! when the thread exits, are not modelled (loom cannot model a thread-local's destructor):
//! the models hold rows as explicit handles, `take` where a thread records for the first time
//! and `give_back` where it exits. A "thread" of the protocol is therefore a span of a loom
//! thread between a `take` and its `give_back`.
//!
//! What the models check is what `rows.rs` documents: a publisher's sums never go back, are
//! exact once the records happen before the publish, and a layer that claims a dropped layer's
//! columns starts from zero in every row, with nothing of the old layer counted for it.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test models http_rows::`.

#[allow(dead_code)]
#[path = "../../cellgate-http/src/sync/rows.rs"]
mod rows;

use std::sync::atomic::{AtomicBool, Ordering};

use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::common::model;
use rows::{Columns, Table};

/// A fresh table for one execution (the crate's is a `static`; rows and tables are leaked
/// there as here, a few bytes per execution).
fn table() -> &'static Table {
    Box::leak(Box::new(Table::new()))
}

/// Thread A counts, exits (gives its row back), and a new thread on the same loom thread takes
/// a row and counts; thread B takes a row (A's given-back one, when A was first) and counts
/// twice; the main thread publishes twice meanwhile, then once after both are joined.
///
/// Every interleaving: the second concurrent sum is not below the first; the final sum is
/// exactly the 4 records; at most two rows are made (a given-back row is reused).
#[test]
fn a_row_given_back_is_taken_while_a_publisher_sums() {
    static B_TOOK_AS_ROW: AtomicBool = AtomicBool::new(false);
    model("a_row_given_back_is_taken_while_a_publisher_sums", || {
        let table = table();
        let layer = Columns::claim(table, 1).expect("free columns");
        let col = layer.base();
        let a = thread::spawn(move || {
            let row = table.take();
            row.bump(col);
            table.give_back(row);
            // A new thread: the row it takes may be the one just given back (with A's count),
            // or, if B took that one, a new one.
            let again = table.take();
            again.bump(col);
            table.give_back(again);
            row as *const rows::Row as usize
        });
        let b = thread::spawn(move || {
            let row = table.take();
            row.bump(col);
            row.bump(col);
            row as *const rows::Row as usize
        });
        let first = layer.totals()[0];
        let second = layer.totals()[0];
        assert!(first <= 4 && second <= 4, "more counted than recorded");
        assert!(
            second >= first,
            "the sum went back from {first} to {second}"
        );
        let (a_row, b_row) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(layer.totals()[0], 4, "a record was lost or counted twice");
        assert!(table.rows_made() <= 2, "a given-back row was not reused");
        if a_row == b_row {
            B_TOOK_AS_ROW.store(true, Ordering::Relaxed);
        }
    });
    assert!(
        B_TOOK_AS_ROW.load(Ordering::Relaxed),
        "no interleaving handed A's row to B"
    );
}

/// An old layer (two columns) counted on by thread T and by the main thread, each on its own
/// row. Both drop it (whichever drops last zeroes and frees its columns); T keeps its row and
/// goes on. The main thread then builds a new layer (the old one's columns, if they are free
/// by then), counts on it and hands it to T through a mutex; T counts on it if it is there.
///
/// Every interleaving: the new layer's sums, read while T may still be counting and after T is
/// joined, are only its own records (main's one, and T's if T got the layer): it starts from
/// zero in every row, including T's, which held an old count, and nothing is counted twice.
#[test]
fn a_new_layer_on_a_dropped_layers_columns_starts_from_zero() {
    static REUSED_WITH_T_COUNTING: AtomicBool = AtomicBool::new(false);
    model(
        "a_new_layer_on_a_dropped_layers_columns_starts_from_zero",
        || {
            let table = table();
            let old = Arc::new(Columns::claim(table, 2).expect("free columns"));
            let old_base = old.base();
            let handed: Arc<Mutex<Option<Arc<Columns>>>> = Arc::new(Mutex::new(None));
            let t = {
                let (old, handed) = (Arc::clone(&old), Arc::clone(&handed));
                thread::spawn(move || {
                    let row = table.take();
                    row.bump(old.base());
                    drop(old);
                    let new = handed.lock().unwrap().clone();
                    match new {
                        Some(new) => {
                            row.bump(new.base());
                            1
                        }
                        None => 0,
                    }
                })
            };
            let row = table.take();
            row.bump(old_base + 1);
            drop(old);
            let new = Arc::new(Columns::claim(table, 2).expect("free columns"));
            row.bump(new.base());
            *handed.lock().unwrap() = Some(Arc::clone(&new));
            let meanwhile = new.totals();
            assert!(
                meanwhile == [1, 0] || meanwhile == [2, 0],
                "the new layer read {meanwhile:?} while T ran: not only its own records"
            );
            let by_t = t.join().unwrap();
            assert_eq!(
                new.totals(),
                [1 + by_t, 0],
                "the new layer's sums are not its records"
            );
            if new.base() == old_base && by_t == 1 {
                REUSED_WITH_T_COUNTING.store(true, Ordering::Relaxed);
            }
        },
    );
    assert!(
        REUSED_WITH_T_COUNTING.load(Ordering::Relaxed),
        "no interleaving gave the new layer the old columns with T counting on them"
    );
}
