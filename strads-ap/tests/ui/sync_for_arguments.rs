use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    let data = DVector::from_fn(10, |i| i as f32)?;
    sync_for!(data, 2, |batch| {
        let _ = batch.len();
    })?;
    Ok(())
}
