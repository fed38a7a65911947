//! Tables built by border-dp itself from its config file, for running
//! without border-mgmt (docs/design.md §3 lets the dataplane build its tables
//! through the same builder mgmt uses: [`conf::tables::build_generation`]).

use conf::tables::{build_generation, no_overrides, TablesError};
use conf::Config;

use crate::lb::Adopted;
use crate::routes::Routes;
use crate::tables_source::{inputs_from_generation, resets_from_generation};

pub use crate::tables_source::OneShot;

/// An in-process generation built from `cfg` (tests, benchmarks; border-dp
/// itself publishes through the tables region instead).
pub fn adopted_from_config(cfg: &Config, generation: u64) -> Result<Adopted<'static>, TablesError> {
    let gen = build_generation(cfg, &no_overrides)?;
    Ok(Adopted::new(
        generation,
        gen.flow_hash_key,
        inputs_from_generation(&gen),
        Routes::from_config(cfg),
    )
    .with_resets(resets_from_generation(&gen)))
}
