use strads_ap::prelude::*;

fn main() -> strads_ap::Result<()> {
    let words = DVector::from_vec(vec!["a".to_string(), "b".to_string()])?;
    let counts = DMap::from_pairs(vec![("a".to_string(), 0.0f64)])?;
    async_for!(0..words.len(), |k| {
        *counts.entry(words[k].clone()).or_insert(0.0) += 1.0;
    })?;
    Ok(())
}
