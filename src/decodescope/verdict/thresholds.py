"""Every threshold a verdict uses, in one place, each with its reason (docs/methodology.md)."""

from __future__ import annotations

from decodescope.analysis.contamination import CONTAMINATION_MARGIN
from decodescope.analysis.decay import MIN_DECAY_OUTPUT_TOKENS

# -- statistics --------------------------------------------------------------------------------
CONFIDENCE = 0.95  # two-sided confidence level of every interval a verdict prints
MIN_UNITS = 2  # trials (or engine windows) per side below which no interval can be computed
RECOMMENDED_TRIALS = 3  # what `probe` defaults to: the smallest n with a usable Welch df
# Smallest relative change that counts as a change at all (pyperf `compare_to --min-speed`
# idea). 3 %: below the run-to-run spread of a single-stream decode rate on a quiet server.
MIN_EFFECT = 0.03
# A "no change" answer is only given when the 95 % interval is narrower than ±10 %: the seed's
# anchor band is 96–107 tok/s and it says to suspect the stack only below 90 (≈ 10 % down), so
# an interval wider than that could hide the regression a user cares about.
MAX_CI_HALF_WIDTH = 0.10
MAX_TRIALS_SUGGESTED = 1000  # "≥ N trials" beyond this is reported as "more than 1000"
# Between-run spread: the relative sd of a run's mean decode / step rate that its own trials
# cannot show, because they share the machine's state of that moment (clocks, neighbours,
# caches). It adds 2·RUN_TO_RUN_SD² to the variance of every decode and step-rate comparison,
# so back-to-back runs of an unchanged server are not read as a change. Default 1 %: a
# dedicated server; `triage --run-spread` sets it for a shared or noisy host, and
# bench/bench_run_noise.py measures it on the machine at hand (docs/methodology.md §5).
RUN_TO_RUN_SD = 0.01
# The spread is learned from the store (verdict/run_spread.py): repeated runs of one caliber on
# one stack. Below MIN_SPREAD_RUNS runs the estimate (k − 1 degrees of freedom: a 95 % interval
# of about 0.6–2.9 × itself at 4) is too thin, and triage of stored runs falls back to a
# conservative prior: PRIOR_RUN_SD, the between-run sd measured for demo-code-rewrite on an
# NVIDIA H200 (7.1 %, 10 runs × 5 trials; /shared run-noise measurements), the largest
# measured for a greedy caliber — this 2-core CPU host measured 3.8 %. The newest
# MAX_SPREAD_RUNS runs of a stack count (older ones may predate a change of the host).
MIN_SPREAD_RUNS = 5
MAX_SPREAD_RUNS = 30
PRIOR_RUN_SD = 0.07
PRIOR_RUN_SD_BASIS = ("the between-run sd measured for demo-code-rewrite on an NVIDIA H200 "
                      "(10 runs × 5 trials)")
# Interleaved A/B (`decodescope ab`, verdict/paired_test.py): a group-sequential paired test. AB_LOOKS
# looks, geometrically spaced from AB_MIN_PAIRS to AB_MAX_PAIRS pairs (6, 9, 13, 19, 27, 40);
# the error of the change test (two-sided) and of the equivalence test (TOST) is each spent
# along the looks by a Lan–DeMets spending function (AB_SPENDING; verdict/spending.py), so the
# chance of a false "beyond noise", and of a false "no change", over all looks is at most α
# each. It never decides on fewer than AB_MIN_PAIRS pairs: the pair sd needs a few pairs.
AB_ALPHA = 0.05
AB_MIN_PAIRS = 6
AB_MAX_PAIRS = 40
AB_LOOKS = 6
# `ab --launch-a/--launch-b` restarts both servers itself: each start is a fresh process of
# each side and AB_PAIRS_PER_START pairs between them; the test's unit is the start's mean
# ln(B/A), whose spread holds the between-process spread (2τ²) and the pairs' (s²/m). Looks
# from AB_MIN_STARTS to AB_MAX_STARTS starts (4, 5, 6, 8, 10, 12: at most 36 pairs): a start
# mean's sd takes a few starts, and at 3 its t quantile (2 df) is too wide to decide.
AB_PAIRS_PER_START = 3
AB_MIN_STARTS = 4
AB_MAX_STARTS = 12
# Pairs of two server processes are not independent when the processes drift apart over minutes
# (measured on an H100, llama.cpp CUDA: one process's per-request rate lag-1 correlated 0.74,
# 50-request medians moving 714–926 tok/s; two identical servers then "differed" by −6 … +14 %
# between repetitions, docs/methodology.md §9). A lag-1 autocorrelation ρ of the pair log
# ratios beyond white noise's 1.96/√n (Bartlett) widens the interval by the AR(1) variance
# factor √((1 + ρ)/(1 − ρ)) and takes n(1 − ρ)/(1 + ρ) effective pairs (ρ at most
# AB_SERIAL_MAX_RHO); from AB_SERIAL_MIN_PAIRS pairs on. Alternating order makes a drift
# within a pair negative-correlated: a ρ below 0 never narrows the interval.
AB_SERIAL_MIN_PAIRS = 8
AB_SERIAL_MAX_RHO = 0.9
# Between-process spread (verdict/process_spread.py): two processes of one stack differ in
# level for minutes (issue 36's H100: fresh llama.cpp processes of one launch 783–941 vs
# 919–1014 tok/s). τ is learned by a one-way random-effects ANOVA over server processes of
# ≥ MIN_PROCESS_RUNS runs, from ≥ MIN_PROCESSES of them (fewer: unknown); `ab` between two
# processes carries it with its uncertainty (2·τ² added to the variance of the mean pair log
# ratio; a generalized confidence interval from the ANOVA, paired_test.gpq_half); the record
# shows its one-sided upper bound at PROCESS_SPREAD_CONFIDENCE. The newest
# MAX_PROCESS_SPREAD_RUNS runs count.
MIN_PROCESSES = 3
MIN_PROCESS_RUNS = 2
PROCESS_SPREAD_CONFIDENCE = CONFIDENCE
MAX_PROCESS_SPREAD_RUNS = 200
AB_SPENDING = "pocock"  # Lan–DeMets Pocock-type: early looks can stop (fast both ways)
# A pair whose trial stalled, was contaminated or missed its caliber is re-taken, at most this
# share of --max-pairs times (at least AB_RETAKES_MIN): beyond, the cause persists and decides.
AB_RETAKE_SHARE = 0.25
AB_RETAKES_MIN = 3
# Stalls decide a verdict only when they recur: in at least this many units of the side that
# has more of them, and in most of its units. One pause in one trial (the host descheduled
# the server for 80 ms while the probe ran) is a note with "rerun", not a REGRESSION: a test
# run read exactly that on an unchanged simulator while the 2-core host was busy.
STALL_MIN_UNITS = 2

# Server state (verdict/server_state.py). A run that starts less than FRESH_SERVER_S after its
# server's process start is a fresh-server run: issue 36's H100 (llama.cpp CUDA) ran its first
# run 12–14 % slower than runs 8–10 — first use of CUDA graphs per shape, kernels compiled on
# first call, weights paged in, clocks ramping — and `spread`'s default cadence (3 trials and
# a 5 s wait per run) puts about ten runs in 10 minutes. A trend over runs (warm-up: upward) is
# a Mann–Kendall test at the verdict's alpha (1 − CONFIDENCE), so a stationary server reads
# "warm-up" at most that often; below TREND_MIN_RUNS runs it cannot be significant at 5 % even
# when perfectly monotone (one-sided: 1/4! ≈ 4.2 % at 4 runs).
FRESH_SERVER_S = 600.0
TREND_ALPHA = 1.0 - CONFIDENCE
TREND_MIN_RUNS = 4
# A history leaves a finished warm-up out of its levels only where its server process keeps
# at least this many runs after it (history.MIN_SEGMENT): leaving out more would leave the
# level after a restart unmeasured, and a stack change at that restart unseen.
WARMUP_LEVEL_RUNS = 3

# -- decomposition -----------------------------------------------------------------------------
# Below this |ln(D2/D1)| (≈ 0.5 %) shares of a delta are noise divided by noise: not printed.
MIN_LOG_DELTA_FOR_SHARES = 0.005
# MAL "carries" a delta when its share of ln(D2/D1) is at least this (the seed's case: ~95 %).
MAL_CARRIES_SHARE = 0.5

# Below this share of drafted steps (tokens per step / MAL on a side), n-gram steps without a
# draft make MAL and tokens per step differ enough to name both (analysis.decompose uses 0.9).
FULL_DRAFT_COVERAGE = 0.9

# -- contamination -----------------------------------------------------------------------------
# Running requests the engine may show above what the probe sent before it counts as foreign
# load, for runs stored without a contamination analysis: the same margin as
# analysis.contamination (a gauge read one step late can still count our previous request).
FOREIGN_RUNNING_TOLERANCE = CONTAMINATION_MARGIN
# Log windows: two sides whose median running-request counts differ by at least this were
# taken at different concurrency (a caliber element), e.g. the seed's "sampled while a
# concurrent session was running code tasks" (running 2 vs 1).
RUNNING_DIFF_IS_CONCURRENCY = 0.5

# -- log windows -------------------------------------------------------------------------------
# A log window counts as decode activity only with at least this many generated tokens; the
# idle/partial windows around a request (a few tokens, or prompt-only) would dilute the rates.
MIN_WINDOW_GENERATION_TOKENS = 1

# -- anchor baselines (`baseline set`, `check`) ------------------------------------------------
# A band derived from runs carries the anchor stack's run-to-run spread (baseline.derive_band):
# no more min..max ± 2 % of one run's trials (issue 32: it alarmed on noise).
# Derived floor: 6 % under the band's low end — the seed's anchor band 96–107 with "suspect the
# stack only if this anchor drops below 90" (90 / 96 = 0.94).
FLOOR_BELOW_BAND = 0.06
# Length decay (% per 1K output tokens) differing from the baseline runs' by more than this many
# percentage points is reported: decay is a stack property (the seed: NVFP4 flat, AWQ decays).
LENGTH_DECAY_DELTA_PP = 3.0
# Length decay is stated only for outputs of at least this many tokens per request (median):
# a slope per 1K tokens fitted over a shorter output extrapolates its content's wobble by
# 1000 / length (384-token outputs read "+128 … +148 % per 1K" on a real H200, issue 21);
# below it the figure is withheld with this reason (analysis.decay, docs/methodology.md).
MIN_LENGTH_DECAY_OUTPUT_TOKENS = MIN_DECAY_OUTPUT_TOKENS
