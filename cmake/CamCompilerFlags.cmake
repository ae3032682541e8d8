# Flags for the twin build. No FMA contraction: fp32 results must follow the written operation order, as the
# numerics contract (docs/numerics.md) and the goldens assume.
add_compile_options(-ffp-contract=off -Wall -Wextra -Wno-unused-parameter)
