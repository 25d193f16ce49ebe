#!/bin/sh
# The app's example clips for speech models, synthesized with espeak-ng (voice en, 22.05 kHz
# mono 16-bit WAV), each with what it says beside it (NAME.txt, shown in the app).
# Run from anywhere: sh assets/speech/make_examples.sh
set -e
cd "$(dirname "$0")"
clip() {  # clip NAME SPEED TEXT
  espeak-ng -v en -s "$2" -w "$1.wav" "$3"
  printf '%s\n' "$3" > "$1.txt"
}
clip hello_world 150 "Hello world, this is a test."
clip quick_brown_fox 150 "The quick brown fox jumps over the lazy dog."
clip weather_report 140 \
  "Good morning. Today will be sunny with a few clouds in the afternoon, and the evening will be cool and dry. Tomorrow brings light rain."
