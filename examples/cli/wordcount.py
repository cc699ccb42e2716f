# Counts the words read from stdin and prints the most common ones: the
# script the README's command-line examples run.
import collections, sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
words = collections.Counter(w.strip('.,:;()`"\'').lower() for w in sys.stdin.read().split())
for word, count in words.most_common(n):
    print(f"{count:5} {word}")
