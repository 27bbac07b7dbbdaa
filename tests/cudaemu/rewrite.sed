# The two CUDA syntaxes g++ does not know, for cudaemu (cudaemu.h): a launch
#   kernel<<<grid, block, shared, stream>>>(args)  ->  kernel * cudaemu::config(grid, block, shared, stream)(args)
# and dynamic shared memory
#   extern __shared__ T name[];  ->  T *name = (T *)cudaemu::dynamic_shared();
s/<<</ * cudaemu::config(/g
s/>>>(/)(/g
s/extern __shared__ \([A-Za-z_][A-Za-z_0-9 ]*\) \([A-Za-z_][A-Za-z_0-9]*\)\[\];/\1 *\2 = (\1 *)cudaemu::dynamic_shared();/
