"""(being written)"""
KERNELS = {}
