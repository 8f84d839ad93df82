use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    // serde has no impls for arrays longer than 32: the error says to use Array<T, N>.
    let rows = DVector::from_fn(3, |_| [0.0f32; 50])?;
    let fine = DVector::from_fn(3, |_| Array([0.0f32; 50]))?;
    println!("{} {}", rows.len(), fine.len());
    Ok(())
}
