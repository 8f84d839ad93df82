// mistakes: 2
use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    let rows: Vec<DVector<f32>> = vec![DVector::from_fn(3, |_| 0.0)?];
    let out = DVector::from_fn(3, |_| 0.0f32)?;
    async_for!(0..out.len(), |k| {
        out[k] = rows[0].len() as f32;
    })?;
    let nested = DVector::from_fn(2, |_| DVector::<f32>::from_vec(vec![]).unwrap())?;
    Ok(())
}
