// A reduction read inside the body holds only its group's part: refused at the read.
use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    strads_ap::init()?;
    let u = DVector::from_fn(10, |_| 0.0f32)?;
    let mut c = 0.0f32;
    let mut best = 0.0f32;
    async_for!(0..10, |k| {
        c += 1.0;
        u[k] += c * 2.0;
        best = best.max(u[k]);
    })?;
    println!("{c} {best}");
    Ok(())
}
