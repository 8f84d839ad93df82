// mistakes: 2
use strads_ap::prelude::*;

struct Stats {
    seen: usize,
}

fn main() -> strads_ap::Result<()> {
    let v = DVector::from_fn(10, |i| i as f32)?;
    // The last value written: which task is last depends on the schedule.
    let mut last = 0.0f32;
    let mut stats = Stats { seen: 0 };
    async_for!(0..v.len(), |k| {
        last = v[k];
        stats.seen += 1;
    })?;
    println!("{last} {}", stats.seen);
    Ok(())
}
