mod common;
mod glove;
mod ising;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let app = args.get(1).map(|s| s.as_str()).unwrap_or("");
    let a = common::parse_args(&args[2.min(args.len())..]);
    match app {
        "ising" => ising::run(&a),
        "glove" => glove::run(&a),
        _ => { eprintln!("usage: newuser54 ising|glove [--mode serial|strads] [--threads N] [--epochs E] [--seed S]"); std::process::exit(2) }
    }
}
