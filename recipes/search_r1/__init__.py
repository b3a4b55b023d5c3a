"""The Search-R1 recipe: GPU config, tool config and run script (run_gpu.sh), and the CPU
run (run_cpu.sh); see README.md in this folder."""
