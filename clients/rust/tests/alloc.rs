//! The steady state allocates nothing on the caller's thread: responses are
//! read into a reused buffer and requests encoded into another.

// Counting allocations needs a GlobalAlloc impl, which is unsafe by
// definition; it only forwards to the system allocator.
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{serve, Peer};
use spillway_client::{Client, Reply, Tier};

/// Counts allocations per thread, so the fake daemon's thread does not count.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: the allocator can run while thread-locals are torn down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: defers every operation to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_requests_do_not_allocate() {
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let mut client = Client::connect(&fake.path).unwrap();
    let payload = [9u8; 100];
    let records = [&payload[..], &payload[..10]];
    for _ in 0..100 {
        client.push(Tier::Sync, &payload).unwrap();
        client.push_batch(Tier::Buffered, &records).unwrap();
        client.health().unwrap();
    }

    let before = allocations();
    for _ in 0..5_000 {
        client.push(Tier::Sync, &payload).unwrap();
        client.push_batch(Tier::Buffered, &records).unwrap();
        client.health().unwrap();
    }
    assert_eq!(allocations() - before, 0, "Client calls allocated");

    let mut pipeline = client.pipeline(32);
    let cycle = |pipeline: &mut spillway_client::Pipeline<'_>| {
        for _ in 0..64 {
            pipeline.push(Tier::Batched, &payload).unwrap();
        }
        for _ in 0..64 {
            assert_eq!(pipeline.recv().unwrap(), Reply::Ack);
        }
    };
    for _ in 0..10 {
        cycle(&mut pipeline);
    }
    let before = allocations();
    for _ in 0..200 {
        cycle(&mut pipeline);
    }
    assert_eq!(allocations() - before, 0, "pipelined calls allocated");
    drop(pipeline);
    drop(client);
    fake.join();
}
