"""Gannet's own load generator for the side-by-side benchmark: scenario definitions
(:mod:`.scenarios`), per-system drivers in worker processes (:mod:`.drivers`), the phase runner
(:mod:`.phases`), result aggregation (:mod:`.stats`), the command line (:mod:`.run`) and the
report (:mod:`.report`)."""
