python3 -c "import torch,sys;print(torch.__version__, torch.version.cuda, torch.__file__)"; which g++ nvcc c++; g++ --version | head -1
T=$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")
ls $T/include/c10/cuda | head -50; ls $T/test 2>/dev/null | head
python3 -c "import accelerate,transformers,peft;print(accelerate.__version__, transformers.__version__, peft.__version__)"
tar czf $OUT/torch_src.tgz -C $T include/c10/cuda include/torch/csrc/cuda/CUDAPluggableAllocator.h include/ATen/cuda/CUDAGraph.h include/ATen/cuda/CUDAGeneratorImpl.h include/c10/core/Allocator.h include/c10/core/CachingDeviceAllocator.h include/torch/csrc/cuda/memory_snapshot.h cuda/memory.py cuda/graphs.py _inductor/cudagraph_trees.py cuda/__init__.py version.py 2>&1 | tail -3
ls -la $OUT
