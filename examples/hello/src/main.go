package main

import "fmt"

func main() { fmt.Println("hello from inside the jail") }
