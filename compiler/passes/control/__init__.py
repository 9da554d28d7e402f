"""Control-flow passes: call inlining, loop unrolling."""
