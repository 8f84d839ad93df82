// mistakes: 2
use strads_ap::prelude::*;

fn parse(s: &str) -> Result<f32, std::num::ParseFloatError> {
    s.parse()
}

fn main() -> strads_ap::Result<()> {
    let v = DVector::from_fn(10, |i| i as f32)?;
    async_for!(0..v.len(), |k| {
        if v[k] > 5.0 {
            break;
        }
        v[k] = parse("1.0")?;
    })?;
    Ok(())
}
