"""One process: median end-to-end ms of MODEL after 0.5 s warm-up (scratch, for env-var A/B)."""
import sys, statistics, time
sys.path.insert(0, "tools")
import common
from benchmark_model import end_to_end
from gles_delegate import Interpreter, GpuDelegate
path, runs = sys.argv[1], int(sys.argv[2])
it = Interpreter(model_path=path, experimental_delegates=[GpuDelegate(precision="fp16_fp32acc")]); it.allocate_tensors()
run_once, _ = end_to_end(it, common.seeded_inputs(it.get_input_details(), 0, common.index_ranges(path)))
common.warm_up(run_once, 10, 0.5)
print(statistics.median(run_once() for _ in range(runs)) * 1e3)
