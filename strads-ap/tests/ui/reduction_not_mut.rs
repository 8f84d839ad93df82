use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    let v = DVector::from_fn(10, |i| i as f32)?;
    let total = 0.0f32;
    async_for!(0..v.len(), |k| {
        total += v[k];
    })?;
    println!("{total}");
    Ok(())
}
