print("Hello, " + input() + "!")
