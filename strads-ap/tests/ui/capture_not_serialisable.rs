use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    let v = DVector::from_fn(10, |i| i as f32)?;
    let lock = std::sync::Mutex::new(2.0f32);
    async_for!(0..v.len(), |k| {
        v[k] *= *lock.lock().unwrap();
    })?;
    Ok(())
}
