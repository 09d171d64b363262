for m in .m1/*.tflite; do
  for rep in 1 2 3; do
    for v in 0 1; do
      r=$(__GL_THREADED_OPTIMIZATIONS=$v python3 .devbench/e2e.py $m 400 2>/dev/null | tail -1)
      echo "$(basename $m) rep$rep threaded=$v $r"
    done
  done
done
