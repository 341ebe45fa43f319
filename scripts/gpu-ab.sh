# A/B: the current benchmark and the shipped one, alternating, in one call.
export LD_LIBRARY_PATH=$PWD/.gpu
end=$((SECONDS + ${AB_SECS:-540}))
pp() { grep -E '^\| \((a|b)\)' "$1" | awk -F'|' '{printf "%s=%s ", substr($2,2,3), $3}'; grep -E '^\| \(a\)' "$1" | awk -F'|' '{printf "ratio %s", $5}'; }
for i in 1 2 3 4 5 6; do
  for v in cur base; do
    b=.gpu/overhead; [ $v = base ] && b=.gpu/base/overhead
    SLUICE_BENCH_ONLY=ping-pong timeout 60 $b > $OUT/pp-$v-$i.md 2>&1
    echo "pp $v $i: $(pp $OUT/pp-$v-$i.md)"
  done
done
for i in 1 2 3; do
  for v in cur base; do
    [ $SECONDS -gt $((end - 70)) ] && break 2
    b=.gpu/overhead; [ $v = base ] && b=.gpu/base/overhead
    s=$SECONDS; timeout 120 $b > $OUT/full-$v-$i.md 2>&1
    echo "full $v $i ($((SECONDS-s)) s): $(grep -E '^\*\*Goals' $OUT/full-$v-$i.md) $(grep -E '^\| 1 \| (1|8) \|' $OUT/full-$v-$i.md | awk -F'|' '{printf "[%s/%s %s]", $3, $4, $5}')"
  done
done
