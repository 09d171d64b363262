"""(being written)"""
SUPPORT = {}
BUILD = {}
