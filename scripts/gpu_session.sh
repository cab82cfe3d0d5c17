#!/usr/bin/env bash
# One call on the GPU machine: any mix of the phases of the four scripts by purpose, in the order given,
# in one process (so testsbg ... testswait spans phases of different scripts), one summary at the end.
# Logs and results go to $OUT (or ./gpu-out).
#
#   scripts/gpu_build_test.sh   build, buildq, buildqb, buildqt, buildlite, tests, testsbg, testswait,
#                               testsgpu1, torch, dist2
#   scripts/gpu_bench.sh        bench, torchbench, recipebench, presetbench, osciperiod, trainbench, optbench, normbench, attnbench, qbench,
#                               smoke1b, distscale, oscispeed
#   scripts/gpu_experiments.sh  data, quick, exp30m, exp70m
#   scripts/gpu_profile.sh      qprofile, sass, dualprofile, dualdetail, rowsdetail, stepprofile
#
# Each script's header describes its phases and the variables they read; shared code is in
# scripts/lib/gpu_common.sh.
#
# usage: scripts/gpu_session.sh PHASE...
here=$(dirname "${BASH_SOURCE[0]}")
for part in gpu_build_test gpu_bench gpu_experiments gpu_profile; do
  source "$here/$part.sh"
done
run_phases "$@"
