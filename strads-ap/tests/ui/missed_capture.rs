use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    let v = DVector::from_fn(10, |i| i as f32)?;
    let double = |x: f32| x * 2.0;
    async_for!(0..v.len(), |k| {
        v[k] = double(v[k]);
    })?;
    Ok(())
}
